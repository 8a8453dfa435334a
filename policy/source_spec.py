"""Parsing a policy SOURCE (``policy.sources``' docstring lists the forms) into a :class:`SourceSpec`,
and keeping credentials out of what is shown (:func:`redact_uri`, :func:`redact_tree`). Nothing here reads a
checkpoint."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from policy.errors import PolicySourceError
from policy.exported import POLICY_JSON
from store import MANIFEST, parse_ref, parse_version_dir

SYNTAX = "<store>/<run>[@<version>|@latest]"


@dataclass(frozen=True)
class SourceSpec:
    """A parsed SOURCE. kind: 'store' (store, run, version; None = latest), 'checkpoint_dir' (path,
    store, run, version) or 'exported' (path)."""

    kind: str
    text: str
    store: str | None = None
    run: str | None = None
    version: int | None = None
    path: Path | None = None

    @property
    def shown(self) -> str:
        """The text with credentials in a query (access_key, secret_key, session_token) blanked."""
        return redact_uri(self.text)


_SECRET_KEYS = ("access_key", "secret_key", "session_token")


def redact_uri(uri: str) -> str:
    """A store URI or SOURCE fit for logs and policy.json: credential values in its query become '***'."""
    if "?" not in uri:
        return uri
    head, _, query = uri.partition("?")
    items = [(k, "***" if k in _SECRET_KEYS else v) for k, v in parse_qsl(query, keep_blank_values=True)]
    return head + "?" + urlencode(items, safe="*:/")


def redact_tree(obj):
    """A config tree (dicts, lists, strings) fit for a file others read: every string holding a query gets
    :func:`redact_uri` (a store URI's credentials become '***'); anything else is returned as it is."""
    if isinstance(obj, str):
        return redact_uri(obj) if "?" in obj else obj
    if isinstance(obj, dict):
        return {k: redact_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_tree(v) for v in obj)
    return obj


def _split_run_version(last: str, text: str) -> tuple[str, int | None]:
    """``<run>[@<version>|@latest]`` (the store's syntax, ``store.parse_ref``); errors name the SOURCE."""
    try:
        return parse_ref(last)
    except ValueError as e:
        raise PolicySourceError(f"policy source {redact_uri(text)!r}: {e} (expected {SYNTAX})") from None


def parse_source(spec: str | os.PathLike) -> SourceSpec:
    """Parse a SOURCE string (see the module docstring). Does not read any checkpoint."""
    text = os.fspath(spec)
    if not isinstance(text, str) or not text.strip():
        raise PolicySourceError("policy source is empty; expected <store>/<run>[@<version>|@latest] or a folder")
    text = text.strip()
    local = Path(text[len("file://") :] if text.startswith("file://") else text)
    if "://" not in text or text.startswith("file://"):
        if local.is_dir():
            if (local / POLICY_JSON).is_file():
                return SourceSpec("exported", text, path=local)
            version = parse_version_dir(local.name)
            if version is not None or (local / MANIFEST).is_file():
                if version is None:
                    raise PolicySourceError(
                        f"policy source {redact_uri(text)!r}: {local} holds {MANIFEST} but is not named "
                        "ckpt-<8 digits>, so its version is unknown (checkpoints sit in <store>/<run>/ckpt-XXXXXXXX)"
                    )
                run_dir = local.resolve().parent
                store, run = str(run_dir.parent), run_dir.name
                return SourceSpec("checkpoint_dir", text, store=store, run=run, version=version, path=local)
            if "@" not in local.name:  # a run folder: its newest version
                if not any(parse_version_dir(p.name) is not None for p in local.iterdir()):
                    raise PolicySourceError(
                        f"policy source {redact_uri(text)!r}: {local} is not an exported package (no {POLICY_JSON}), "
                        f"not a checkpoint folder (no {MANIFEST}) and not a run folder (no ckpt-XXXXXXXX in it)"
                    )
                return SourceSpec("store", text, store=str(local.resolve().parent), run=local.name, version=None)
        if local.is_file():
            raise PolicySourceError(
                f"policy source {redact_uri(text)!r} is a file; give a folder (a ckpt-XXXXXXXX folder, an exported "
                f"policy folder) or {SYNTAX}"
            )
        if parse_version_dir(local.name) is not None:
            raise PolicySourceError(f"policy source {redact_uri(text)!r}: checkpoint folder {local} does not exist")
        parent, _, last = text.rstrip("/").rpartition("/")
        if not parent:
            raise PolicySourceError(
                f"policy source {redact_uri(text)!r}: not a folder here, and not <store>/<run>[@<version>|@latest] "
                "(the store part is missing)"
            )
        run, version = _split_run_version(last, text)
        if "@" not in last and not Path(parent).is_dir():
            raise PolicySourceError(f"policy source {redact_uri(text)!r}: no such folder, and no store at {parent}")
        return SourceSpec("store", text, store=parent, run=run, version=version)
    # s3:// (or another scheme the store knows): the query belongs to the store URI
    parts = urlsplit(text)
    path = parts.path.rstrip("/")
    parent, _, last = path.rpartition("/")
    if not last or not (parts.netloc + parent).strip("/"):
        raise PolicySourceError(
            f"policy source {redact_uri(text)!r}: expected <scheme>://<bucket>/<prefix>/<run>[@<version>]"
        )
    run, version = _split_run_version(last, text)
    store = urlunsplit((parts.scheme, parts.netloc, parent, parts.query, ""))
    return SourceSpec("store", text, store=store, run=run, version=version)
