#!/usr/bin/env python3
"""Counts the non-test lines of src/: every line of every .rs file, less the files that are
compiled for tests only (declared behind #[cfg(test)] in their parent) and the inline
`#[cfg(test)] mod ... { ... }` blocks. Prints the total, and with -v one line per file."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent / "src"
TEST_MOD = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")
MOD_DECL = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
PATH_ATTR = re.compile(r'^\s*#\[path\s*=\s*"([^"]+)"\]')
MOD_BLOCK = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")


def test_only_files():
    """Files declared as `#[cfg(test)] mod name;`."""
    found = set()
    for path in ROOT.rglob("*.rs"):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines[:-1]):
            if not TEST_MOD.match(line):
                continue
            j, explicit = i + 1, None
            while j < len(lines) and lines[j].strip().startswith("#["):
                attr = PATH_ATTR.match(lines[j])
                if attr:
                    explicit = path.parent / attr.group(1)
                j += 1
            decl = MOD_DECL.match(lines[j]) if j < len(lines) else None
            if not decl:
                continue
            if explicit is not None:
                found.add(explicit)
                continue
            name = decl.group(3)
            base = path.parent if path.name in ("mod.rs", "lib.rs", "main.rs") else path.with_suffix("")
            for candidate in (base / f"{name}.rs", base / name / "mod.rs"):
                if candidate.exists():
                    found.add(candidate)
    return found


def non_test_lines(path):
    lines = path.read_text().splitlines()
    count, i = 0, 0
    while i < len(lines):
        if TEST_MOD.match(lines[i]) and i + 1 < len(lines) and MOD_BLOCK.match(lines[i + 1]):
            depth, j = 0, i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                j += 1
                if depth <= 0:
                    break
            i = j
            continue
        count += 1
        i += 1
    return count


def main():
    skip = test_only_files()
    total = 0
    for path in sorted(ROOT.rglob("*.rs")):
        if path in skip:
            continue
        n = non_test_lines(path)
        total += n
        if "-v" in sys.argv:
            print(f"{n:6} {path.relative_to(ROOT.parent)}")
    print(total)


if __name__ == "__main__":
    main()
