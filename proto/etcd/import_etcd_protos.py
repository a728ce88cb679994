#!/usr/bin/env python3
"""Copies etcd's v3 API protos from Debian's golang-etcd-server-dev into a
flat tree that protoc can compile for C++ (proto/CMakeLists.txt).

etcd's protos import gogoproto and google.api annotations, which only its Go
code generator and HTTP gateway use, and their paths differ between etcd 3.4
(Debian 12) and 3.5 (Debian 13). This keeps the packages, messages, fields
and services as they are (so the wire format and the gRPC method names are
etcd's), rewrites the imports to etcd/<package>.proto and drops the custom
options. Usage: import_etcd_protos.py OUT_DIR [SEARCH_ROOT]
"""
import os
import re
import sys

# The files the client needs, by the directory (= package) that holds them.
WANTED = {
    "etcdserverpb": "rpc.proto",
    "mvccpb": "kv.proto",
    "authpb": "auth.proto",
    "v3electionpb": "v3election.proto",
}


def find_sources(root):
    found = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # quilt's .pc copies
        package = os.path.basename(dirpath)
        name = WANTED.get(package)
        # functional/rpcpb has an rpc.proto of its own: match the directory.
        if name in files and package not in found:
            found[package] = os.path.join(dirpath, name)
    return found


def drop_custom_options(text):
    """Removes `option (x) = ...;` statements (with any {...} body) and
    `[(x) = ...]` field options: custom options of other generators."""
    out = []
    i = 0
    while i < len(text):
        m = re.compile(r"option\s*\(").search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i : m.start()])
        depth = 0
        j = m.end()
        while j < len(text):
            c = text[j]
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == ";" and depth == 0:
                break
            j += 1
        i = j + 1
    text = "".join(out)
    return re.sub(r"\[\s*\([^\]]*\]", "", text)


def convert(path, imports):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    lines = []
    for line in text.splitlines():
        m = re.match(r'\s*import\s+"([^"]+)"\s*;', line)
        if m:
            package = os.path.basename(os.path.dirname(m.group(1)))
            if package in imports:
                lines.append(f'import "etcd/{package}.proto";')
            continue  # gogoproto, google/api, versionpb: options only
        lines.append(line)
    return drop_custom_options("\n".join(lines) + "\n")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    out = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) == 3 else "/usr/share/gocode/src"
    found = find_sources(root)
    missing = sorted(set(WANTED) - set(found))
    if missing:
        sys.exit(
            f"import_etcd_protos: no {', '.join(WANTED[p] for p in missing)} under {root}: "
            "install Debian's golang-etcd-server-dev (tools/dev/install-deps.sh)"
        )
    os.makedirs(os.path.join(out, "etcd"), exist_ok=True)
    for package, path in found.items():
        target = os.path.join(out, "etcd", f"{package}.proto")
        text = convert(path, found)
        old = None
        if os.path.exists(target):
            with open(target, encoding="utf-8") as f:
                old = f.read()
        if old != text:  # leave the file's time alone: no needless rebuild
            with open(target, "w", encoding="utf-8") as f:
                f.write(text)
        print(f"{package}: {path}")


if __name__ == "__main__":
    main()
