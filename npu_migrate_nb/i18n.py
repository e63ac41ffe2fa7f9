"""Every word we say to a person goes through here: gettext, domain ``npu_migrate_nb``.

English is the source text; ``locale/zh_CN/LC_MESSAGES/npu_migrate_nb.po`` holds Simplified
Chinese, compiled into ``.mo`` (and the JSON JupyterLab's translator reads) when the package is
built (``tools/catalog.py compile``, run by the build hook).

The language, first found wins:
  1. ``with language("zh_CN"):`` — a request's or a call's own language (the server per request);
  2. ``set_language("zh_CN")`` — the process's choice (``--lang``, ``%npu_lang``);
  3. the environment, as gettext reads it: ``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``.
A language we have no catalog for reads English.

Messages are translated when they are made. A message kept in a module-level constant is marked
with ``N_`` (found by extraction, left English) and translated with ``_`` where it is used.
Placeholders are named (``_("{count} ranks").format(count=n)``) so a translation can reorder them.
"""

from __future__ import annotations

import contextlib
import contextvars
import gettext
import os
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Mapping, Optional

DOMAIN = "npu_migrate_nb"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
SOURCE_LANGUAGE = "en"
LANGUAGES = ("en", "zh_CN")  # what --lang, %npu_lang and the server accept
ENVIRONMENT_VARIABLES = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")

_call_language: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("npu_migrate_nb_language", default=None)
_process_language: Optional[str] = None


def normalize(name: Optional[str]) -> Optional[str]:
    """``zh-CN``, ``zh_CN.UTF-8``, ``zh``, ``zh-Hans`` -> ``zh_CN``; ``en_US``, ``C`` -> ``en``; others None."""
    if not name:
        return None
    base = name.split(".")[0].split("@")[0].replace("-", "_")
    language, _sep, region = base.partition("_")
    language = language.lower()
    if language in ("c", "posix", "en"):
        return "en"
    if language == "zh" and region.lower() in ("", "cn", "hans", "sg", "hans_cn"):
        return "zh_CN"
    return None


def from_environment(environ: Mapping[str, str] = os.environ) -> str:
    """The language gettext would pick from the environment (``LANGUAGE`` may list several: ``zh_CN:en``)."""
    for variable in ENVIRONMENT_VARIABLES:
        value = environ.get(variable)
        if not value:
            continue
        for name in value.split(":") if variable == "LANGUAGE" else [value]:
            chosen = normalize(name)
            if chosen is not None:
                return chosen
        if variable != "LANGUAGE":
            # The first variable that is set decides, as in gettext; a language we lack reads English.
            return SOURCE_LANGUAGE
    return SOURCE_LANGUAGE


def current() -> str:
    return _call_language.get() or _process_language or from_environment()


def choose(name: str) -> str:
    """The language ``name`` stands for, or ValueError naming the ones we have."""
    chosen = normalize(name)
    if chosen is None:
        raise ValueError(
            _("unknown language {name!r}: choose one of {choices}").format(name=name, choices=", ".join(LANGUAGES))
        )
    return chosen


def set_language(name: Optional[str]) -> str:
    """Make ``name`` this process's language (None: follow the environment again); returns the one chosen."""
    global _process_language
    _process_language = choose(name) if name is not None else None
    return current()


@contextlib.contextmanager
def language(name: Optional[str]) -> Iterator[str]:
    """Speak ``name`` inside the block (None: keep the current language); safe across threads and tasks."""
    token = _call_language.set(choose(name) if name is not None else current())
    try:
        yield _call_language.get()
    finally:
        _call_language.reset(token)


@lru_cache(maxsize=None)
def translations(name: str) -> gettext.NullTranslations:
    if name == SOURCE_LANGUAGE:
        return gettext.NullTranslations()
    return gettext.translation(DOMAIN, localedir=str(LOCALE_DIR), languages=[name], fallback=True)


def _(message: str) -> str:
    """``message`` in the current language."""
    return translations(current()).gettext(message)


def ngettext(singular: str, plural: str, count: int) -> str:
    return translations(current()).ngettext(singular, plural, count)


def N_(message: str) -> str:
    """Marks ``message`` for the catalog without translating it (translate it with ``_`` where it is said)."""
    return message


def width(text: str) -> int:
    """Columns ``text`` takes in a terminal: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(character) in ("W", "F") else 1 for character in text)


def ljust(text: str, columns: int) -> str:
    """``text`` padded to ``columns`` terminal columns (``str.ljust`` counts a Chinese character as one)."""
    return text + " " * max(0, columns - width(text))


def rjust(text: str, columns: int) -> str:
    return " " * max(0, columns - width(text)) + text
