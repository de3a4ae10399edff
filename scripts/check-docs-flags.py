#!/usr/bin/env python3
"""Every flag `loomc --help` lists is documented in docs/cli.md's loomc
section (its flag table names it as `--flag...`), and every flag that table
names is one loomc has (issue 46: the docs and the tool said different
things). Usage: check-docs-flags.py LOOMC [docs/cli.md]; prints what is
missing on either side and exits 1, or one line and 0."""
import re
import subprocess
import sys


def main():
    loomc = sys.argv[1]
    doc = sys.argv[2] if len(sys.argv) > 2 else "docs/cli.md"
    helptext = subprocess.run([loomc, "--help"], capture_output=True, text=True,
                              check=True).stdout
    tool = set(re.findall(r"^  (--?[a-z0-9][a-z0-9-]*)", helptext, re.M)) | {"--help",
                                                                          "--help-hidden"}
    text = open(doc).read()
    section = text.split("\n## loomc\n", 1)[1].split("\n## ", 1)[0]
    # The table's first column: each `--flag...` (or `-o`) in it.
    # (cells split at unescaped bars: a value list is written a\|b)
    first = [re.split(r"(?<!\\)\|", row)[1] for row in section.splitlines()
             if row.startswith("| ") and row.count("|") >= 3]
    documented = set()
    for cell in first:
        for span in re.findall(r"`([^`]*)`", cell):
            documented.update(re.findall(r"(?:^|\s)(--?[a-z0-9][a-z0-9-]*)", span))
    mentioned = set(re.findall(r"(--?[a-z0-9][a-z0-9-]+)", section))
    missing = sorted(f for f in tool if f not in documented)
    # (MLIR's options are loomc's too, listed by --help-hidden)
    unknown = sorted(f for f in documented if f not in tool and not f.startswith("--mlir-"))
    for f in missing:
        print(f"{doc}: loomc's flag {f} is not in the loomc flag table")
    for f in unknown:
        print(f"{doc}: the loomc flag table names {f}, which `loomc --help` does not list")
    if missing or unknown:
        sys.exit(1)
    print(f"check-docs-flags: the {len(tool)} flags of loomc --help and {doc}'s table agree"
          f" ({len(mentioned)} flag names mentioned in the section)")


if __name__ == "__main__":
    main()
