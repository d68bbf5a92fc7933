"""fleetkit: helpers for python blocks run by codellm (API-compatible with trip2g's fleetkit).

The last block's stdout is the whole contract: one JSON line {"changes": [...], "answer": "..."}.
These helpers build that line and the markdown notes in it.

    import fleetkit
    fleetkit.emit([fleetkit.note("calls/q1.md", {"title": "Q1 planning"}, "# Q1\n")], "wrote 1 note")

codellm ships this module inside its binary and puts it on PYTHONPATH, read-only, for every block.
Rendering uses PyYAML's safe_dump (the system python3-yaml), exactly as trip2g's image does, so a note
renders byte for byte as it does there.
"""

import json
import os

import yaml

__all__ = [
    "render",
    "note",
    "write",
    "patch",
    "emit",
    "bag",
    "frontmatter",
    "secrets",
    "note_frontmatter",
    "parse_frontmatter",
]


class Frontmatter(dict):
    """A mapping whose missing keys read as None through attribute access (data.title)."""

    def __getattr__(self, name):
        return self.get(name)


def render(meta, body=""):
    """YAML frontmatter (key order as given, quoting decided by yaml.safe_dump), then body."""
    if not meta:
        return body
    dumped = yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)
    return "---\n" + dumped.rstrip() + "\n---\n" + body


def write(path, content):
    """A change replacing the whole note at path."""
    return {"path": path, "content": content}


def note(path, meta, body=""):
    """A write change carrying render(meta, body)."""
    return write(path, render(meta, body))


def patch(path, find, replace):
    """A change replacing the first occurrence of find with replace."""
    return {"path": path, "find": find, "replace": replace}


def emit(changes=(), answer=""):
    """Print the stdout contract. Call it once, last: anything else on stdout breaks the run."""
    print(json.dumps({"changes": list(changes), "answer": answer}))


def bag():
    """The delivery bag ($FLEET_INPUT), or {} outside a delivery."""
    where = os.environ.get("FLEET_INPUT")
    if not where:
        return {}
    with open(where, "r", encoding="utf-8") as fh:
        return json.load(fh)


def frontmatter():
    """The role note's own frontmatter (its configuration); values arrive as strings."""
    return Frontmatter(bag().get("frontmatter") or {})


def secrets():
    """The fields codellm unsealed for this run (the bag's unseal list), by frontmatter field name.

    Kept apart from frontmatter(), which still holds the ciphertext: the frontmatter is what a role dumps
    while debugging, and this way that dump does not carry the plaintext. Missing keys read as None;
    empty outside a delivery or when the role unseals nothing.
    """
    return Frontmatter(bag().get("secrets") or {})


def parse_frontmatter(content):
    """The frontmatter mapping of a markdown string; empty without one, unterminated, or not a mapping."""
    if not content.startswith("---\n"):
        return Frontmatter()
    end = content.find("\n---", 3)
    if end < 0:
        return Frontmatter()
    loaded = yaml.safe_load(content[4:end])
    if not isinstance(loaded, dict):
        return Frontmatter()
    return Frontmatter(loaded)


def note_frontmatter(path):
    """The frontmatter of a note the bag carries (attached_notes, then changed_files); KeyError otherwise."""
    current = bag()
    for section in ("attached_notes", "changed_files"):
        for entry in current.get(section) or []:
            if entry.get("path") == path:
                return parse_frontmatter(entry.get("content") or "")
    raise KeyError(
        "note %r is not in the delivery bag; widen the role's attach_notes to cover it" % path
    )
