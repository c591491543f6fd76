"""The debug page's templates: the standard library's ``string.Template``, with escaping that cannot be forgotten.

The HTML is in ``templates/page.html``, in named fragments; the style and the script are ``templates/page.css`` and
``templates/page.js``, shipped as they are (package data). ``fragment`` fills a fragment's ``$names``: every value
is html-escaped (quotes too, so a value is safe in a quoted attribute) unless it is ``Markup``, and only this
module makes ``Markup``: a filled fragment, a join of them, the static style and script. So a caller cannot put
unescaped text into the page, and never escapes by hand. Why not jinja2: docs/dependencies.md.

The files are read when this module is imported, which the debug endpoint does as it is built: an agent installed
without them stops at start with one line (a ``ConfigError``), not at the first visit. The escaping's module (html,
whose entity table is 0.5 MiB) loads at the first page instead: an agent nobody looks at never pays for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib.resources import files
from string import Template

from agent.config import ConfigError

__all__ = ["Markup", "fragment", "join", "FRAGMENTS", "STYLE", "SCRIPT", "NOTHING", "TEMPLATES"]

TEMPLATES = ("page.html", "page.css", "page.js")  # in templates/, shipped as package data


class Markup(str):
    """Text that is already HTML (goes into a fragment as it is). Made here only."""

    __slots__ = ()


def _read(name: str) -> str:
    path = files(__package__) / "templates" / name
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"the debug page's template {name} cannot be read ({exc.strerror or exc}: {path}); the "
                          "agent's installation is incomplete: reinstall it (or pass --debug-address off)") from None


def _fragments(text: str) -> dict[str, Template]:
    """``<!-- fragment: NAME -->`` starts a fragment, which runs to the next one (its last newline dropped)."""
    parts = re.split(r"^<!-- fragment: (\w+) -->\n", text, flags=re.MULTILINE)
    return {name: Template(body.removesuffix("\n")) for name, body in zip(parts[1::2], parts[2::2], strict=True)}


# Read once, at import: the fragments by name, the style and the script as shipped.
_PAGE, _STYLE, _SCRIPT = (_read(name) for name in TEMPLATES)
FRAGMENTS = _fragments(_PAGE)
STYLE = Markup(_STYLE)
SCRIPT = Markup(_SCRIPT)
NOTHING = Markup()  # a part the page leaves out (no PDB risk, no problems)


def _escaped(value: object) -> str:
    from html import escape  # at the first page, not at start (see above); then a lookup in sys.modules

    return value if isinstance(value, Markup) else escape(str(value), quote=True)


def fragment(name: str, /, **values: object) -> Markup:
    """Fragment ``name`` with its ``$names`` filled: each value escaped unless it is Markup; a name the fragment has
    and ``values`` lacks is a KeyError, never an empty hole."""
    return Markup(FRAGMENTS[name].substitute({key: _escaped(value) for key, value in values.items()}))


def join(parts: Iterable[Markup]) -> Markup:
    """Filled fragments one after another (a table's rows)."""
    return Markup("".join(_escaped(part) for part in parts))
