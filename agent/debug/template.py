"""The debug page's templates: the standard library's ``string.Template``, with escaping that cannot be forgotten.

The HTML is in ``templates/page.html``, in named fragments; the style and the script are ``templates/page.css`` and
``templates/page.js``, shipped as they are (package data). ``fragment`` fills a fragment's ``$names``: every value
is html-escaped (quotes too, so a value is safe in a quoted attribute) unless it is ``Markup``, and only this
module makes ``Markup``: a filled fragment, a join of them, the static style and script. So a caller cannot put
unescaped text into the page, and never escapes by hand. Why not jinja2: docs/dependencies.md.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from importlib.resources import files
from string import Template

__all__ = ["Markup", "fragment", "join", "FRAGMENTS", "STYLE", "SCRIPT", "NOTHING"]


class Markup(str):
    """Text that is already HTML (goes into a fragment as it is). Made here only."""

    __slots__ = ()


def _read(name: str) -> str:
    return (files(__package__) / "templates" / name).read_text(encoding="utf-8")


def _fragments(text: str) -> dict[str, Template]:
    """``<!-- fragment: NAME -->`` starts a fragment, which runs to the next one (its last newline dropped)."""
    parts = re.split(r"^<!-- fragment: (\w+) -->\n", text, flags=re.MULTILINE)
    return {name: Template(body.removesuffix("\n")) for name, body in zip(parts[1::2], parts[2::2], strict=True)}


# Read once, when the page's module is first imported: the fragments by name, the style and the script as shipped.
FRAGMENTS = _fragments(_read("page.html"))
STYLE = Markup(_read("page.css"))
SCRIPT = Markup(_read("page.js"))
NOTHING = Markup()  # a part the page leaves out (no PDB risk, no problems)


def _escaped(value: object) -> str:
    return value if isinstance(value, Markup) else html.escape(str(value), quote=True)


def fragment(name: str, /, **values: object) -> Markup:
    """Fragment ``name`` with its ``$names`` filled: each value escaped unless it is Markup; a name the fragment has
    and ``values`` lacks is a KeyError, never an empty hole."""
    return Markup(FRAGMENTS[name].substitute({key: _escaped(value) for key, value in values.items()}))


def join(parts: Iterable[Markup]) -> Markup:
    """Filled fragments one after another (a table's rows)."""
    return Markup("".join(_escaped(part) for part in parts))
