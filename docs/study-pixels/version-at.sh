# Sourced by the probe scripts beside it (needs PY): version_at RUN_FOLDER N prints the store version a
# run committed after DAgger round N (the checkpoint whose manifest gives that reason), nothing if none.
version_at() {
  $PY - "$1" "DAgger round $2" <<'PYEOF'
import json, pathlib, sys
for m in sorted(pathlib.Path(sys.argv[1]).glob("ckpt-*/MANIFEST.json")):
    if json.loads(m.read_text()).get("meta", {}).get("reason") == sys.argv[2]:
        print(int(m.parent.name[5:]))
        break
PYEOF
}
