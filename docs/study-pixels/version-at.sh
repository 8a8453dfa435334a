# Sourced by the probe scripts beside it (needs PY): version_at RUN_FOLDER N prints the store version a
# run committed after DAgger round N (the checkpoint whose manifest gives that reason). Where the run has no
# such checkpoint it says which run and round on stderr and fails; assign its output (v=$(version_at ...))
# so that `set -e` stops the script there rather than handing evaluation a spec ending in a bare "@".
version_at() {
  $PY - "$1" "$2" <<'PYEOF'
import json, pathlib, sys
run, n = pathlib.Path(sys.argv[1]), sys.argv[2]
if not run.is_dir():
    sys.exit(f"version_at: no run folder {run}")
manifests = sorted(run.glob("ckpt-*/MANIFEST.json"))  # the committed versions, oldest first
for m in manifests:
    if json.loads(m.read_text()).get("meta", {}).get("reason") == f"DAgger round {n}":
        print(int(m.parent.name[5:]))
        break
else:
    kept = f"versions {int(manifests[0].parent.name[5:])}-{int(manifests[-1].parent.name[5:])}" if manifests else "none"
    sys.exit(f"version_at: {run} has no checkpoint after DAgger round {n} (kept: {kept}; store.keep_last may "
             "have pruned it, or the run stopped before that round)")
PYEOF
}
