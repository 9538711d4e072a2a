#!/usr/bin/env python3
"""Writes a daemon's default configuration file from its own --help (one place per fact: the
options, their defaults and descriptions are the daemon's; doc/operations.md §Packages).

  gen-config.py BINARY NAME OUT

Every option of `BINARY --help` appears, with its description as a comment; the options the
package sets (below, SET) are active lines, all others are commented out showing the built-in
default. The format is the TOML subset CLI11's --config reads (key = value)."""
import re
import subprocess
import sys

# What the packaged instance "default" sets: state under /var/lib/asymnvm (the unit's
# StateDirectory), one embedded coordinator shared by the daemons of the host, fixed ports (so a
# firewall can name them), metrics on.
SET = {
    "backend": {
        "pool": "/var/lib/asymnvm/backend-default.pool",
        "coord": "dir:/var/lib/asymnvm/coord",
        "listen": "tcp://127.0.0.1:7100",
        "log-listen": "tcp://127.0.0.1:7101",
        "metrics-listen": "127.0.0.1:9471",
    },
    "mirror": {
        "pool": "/var/lib/asymnvm/mirror-default.pool",
        "coord": "dir:/var/lib/asymnvm/coord",
        "listen": "tcp://127.0.0.1:7110",
        "data-listen": "tcp://127.0.0.1:7111",
        "serve-listen": "tcp://127.0.0.1:7112",
        "serve-log-listen": "tcp://127.0.0.1:7113",
        "metrics-listen": "127.0.0.1:9472",
    },
    "kv": {
        "pool": "/var/lib/asymnvm/kv-default.pool",
        "coord": "dir:/var/lib/asymnvm/coord",
        "listen": "tcp://127.0.0.1:7120",
        "log-listen": "tcp://127.0.0.1:7121",
        "rdmp-listen": "tcp://127.0.0.1:7122",
        "oq-worker-listen": "tcp://127.0.0.1:7123",
        "resp-port": "6380",
        "metrics-listen": "127.0.0.1:9473",
    },
}
SKIP = {"help", "config"}


def parse_help(text):
    """[(name, type, default, description)] from CLI11's help layout."""
    opts = []
    for line in text.splitlines():
        m = re.match(r"^  (?:-\w,)?--([\w-]+)(?: (\S+))?(?: (?:\.\.\.|REQUIRED))*\s*(.*)$", line)
        if m:
            name, typ, desc = m.group(1), m.group(2) or "", m.group(3).strip()
            if typ in ("...", "REQUIRED"):
                typ = ""
            default = typ.split("=", 1)[1] if "=" in typ else ""
            opts.append([name, typ, default, desc])
        elif opts and line.startswith(" " * 20) and line.strip():
            opts[-1][3] = (opts[-1][3] + " " + line.strip()).strip()
    return opts


def value(typ, v):
    if typ.startswith(("UINT", "INT", "FLOAT")) and re.fullmatch(r"-?[0-9.]+", v):
        return v
    if typ == "":
        return v if v in ("true", "false") else "false"
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    binary, name, out = sys.argv[1], sys.argv[2], sys.argv[3]
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, check=True).stdout
    sets = SET[name]
    lines = [
        f"# asymnvm-{name}, instance \"default\" (systemd: asymnvm-{name}@default reads",
        f"# /etc/asymnvm/{name}-default.conf; another instance NAME reads {name}-NAME.conf).",
        f"# Generated from `asymnvm-{name} --help`: every option, key = value. A commented line",
        "# shows the built-in default; a command-line option overrides the file. doc/operations.md",
        "",
    ]
    seen = set()
    for opt, typ, default, desc in parse_help(text):
        if opt in SKIP or opt.startswith("TEST"):
            continue
        seen.add(opt)
        lines.append("# " + desc if desc else f"# --{opt}")
        if opt in sets:
            lines.append(f"{opt} = {value(typ, sets[opt])}")
        elif typ == "":
            lines.append(f"# {opt} = false")
        else:
            lines.append(f"# {opt} = {value(typ, default) if default else ''}".rstrip())
        lines.append("")
    missing = set(sets) - seen
    if missing:
        sys.exit(f"gen-config: asymnvm-{name} has no option {sorted(missing)}")
    with open(out, "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
