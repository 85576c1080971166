"""Every relative link in the README and docs/ leads somewhere: the file exists, and the
section it names (``#anchor``) is a heading of that file, as GitHub makes anchors."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
_CODE = re.compile(r"`[^`\n]*`")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of ``markdown``: lower case, punctuation other
    than ``-`` and ``_`` dropped, each space a ``-``; a repeated one gets ``-1``, ``-2``…"""
    seen: Counter[str] = Counter()
    out = set()
    for line in _FENCE.sub("", markdown).splitlines():
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).replace("`", "").lower()).replace(" ", "-")
            out.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
            seen[slug] += 1
    return out


def links(markdown: str) -> list[str]:
    """The targets of ``markdown``'s links outside code, images left out."""
    return _LINK.findall(_CODE.sub("", _FENCE.sub("", markdown)))


def broken(doc: Path) -> list[str]:
    """The relative links of ``doc`` whose file or section does not exist."""
    out = []
    for target in links(doc.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: …
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if not file.exists():
            out.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            out.append(f"{target}: no such section")
    return out


def _documents() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=REPO, capture_output=True, text=True, check=True)
    return [REPO / name for name in tracked.stdout.split()]


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc: Path) -> None:
    assert broken(doc) == []


def test_anchors_follow_github() -> None:
    text = "# Top\n## After a restore: `pacer after-restore`'s batches\n## Top\n```\n# not a heading\n```\n"
    assert anchors(text) == {"top", "after-a-restore-pacer-after-restores-batches", "top-1"}


def test_a_missing_file_or_section_is_reported(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# There\n")
    doc.write_text("[ok](b.md#there) [gone](c.md) [wrong](b.md#here) [self](#a) [lost](#z) `[code](x.md)` "
                   "![image](img.png) [web](https://example.com/x)\n# A\n")
    assert broken(doc) == ["c.md: no such file", "b.md#here: no such section", "#z: no such section"]
