"""Rewrites a wheel's version and adds requirements to it: the CUDA wheel's metadata
(scripts/build-wheel.sh --cuda). pyproject.toml describes the CPU wheel; rather than keep a
second pyproject (or make its [project] table dynamic), the CUDA build takes the wheel
scikit-build-core wrote and gives it a local version (0.1.0+cu13) and the NVIDIA runtime wheels
as Requires-Dist, before auditwheel repairs it.

    python tools/wheel_metadata.py WHEEL LOCAL [REQUIREMENT ...]

writes the new wheel beside WHEEL (its file name carries the new version) and removes WHEEL.
Only the standard library: a wheel is a zip with a RECORD of sha256 digests.
"""
import base64
import hashlib
import os
import sys
import zipfile


def digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + h


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    src, local, reqs = argv[0], argv[1], argv[2:]
    with zipfile.ZipFile(src) as z:
        infos = z.infolist()
        files = {i.filename: z.read(i) for i in infos}
    old_info = next(n.split("/")[0] for n in files if n.split("/")[0].endswith(".dist-info"))
    name, version = old_info[: -len(".dist-info")].rsplit("-", 1)
    if "+" in version:
        raise SystemExit("wheel_metadata: %s already has a local version" % src)
    new_version = version + "+" + local
    new_info = "%s-%s.dist-info" % (name, new_version)

    meta = files[old_info + "/METADATA"].decode()
    head, sep, body = meta.partition("\n\n")  # headers, then the description
    lines = []
    for line in head.split("\n"):
        if line.startswith("Version: "):
            line = "Version: " + new_version
        lines.append(line)
    # After the last requirement without a marker (numpy), before the extras' ones.
    at = max((i for i, l in enumerate(lines) if l.startswith("Requires-Dist: ") and ";" not in l),
             default=len(lines) - 1)
    lines[at + 1:at + 1] = ["Requires-Dist: " + r for r in reqs]
    files[old_info + "/METADATA"] = ("\n".join(lines) + sep + body).encode()

    renamed = {}
    for n, data in files.items():
        if n.startswith(old_info + "/"):
            n = new_info + n[len(old_info):]
        renamed[n] = data
    record = new_info + "/RECORD"
    rows = ["%s,%s,%d" % (n, digest(d), len(d)) for n, d in renamed.items() if n != record]
    rows.append(record + ",,")
    renamed[record] = ("\n".join(rows) + "\n").encode()

    base = os.path.basename(src)
    prefix = "%s-%s-" % (name, version)
    if not base.startswith(prefix):
        raise SystemExit("wheel_metadata: %s is not named %s*" % (base, prefix))
    dst = os.path.join(os.path.dirname(src), "%s-%s-%s" % (name, new_version, base[len(prefix):]))
    modes = {i.filename: i.external_attr for i in infos}
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in renamed.items():
            zi = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            old = old_info + n[len(new_info):] if n.startswith(new_info + "/") else n
            zi.external_attr = modes.get(old, 0o644 << 16)
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.remove(src)
    print(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
