"""Numbered spans of the input: `--data 'DIR/fra-{SPAN}.txt'` names fra-1.txt, fra-2.txt...,
and the newest span is the highest number (TFX's ExampleGen convention).

The rules are TFX's (tfx/components/example_gen/utils.py), so a pattern checked here is one its
driver accepts, each refusal worded as one sentence: `{SPAN}` (or `{SPAN:WIDTH}`, zero padded)
once, and the span a file name holds is a whole number written as the spec writes it back.
Two limits are nmt's own: `{SPAN}` in the file name (the directory is ExampleGen's input_base,
Kubeflow's data_root parameter), and no `{VERSION}` or date specs. Pure Python at import, so
the CLI checks a pattern before TFX loads.
"""
from __future__ import annotations

import re
from typing import Iterable

from components.fra_example_gen import parser

# ExampleGen's exec property and its Examples' custom property: the spans read, "3,4".
SPANS_PROPERTY = "spans"
# TFX's SPAN_FULL_REGEX: '{SPAN}' or '{SPAN:WIDTH}'.
_SPEC = re.compile(r"\{SPAN(?::(?P<width>[^}]*))?\}")
# TFX's other specs: versions and spans named by dates are not read here.
_OTHER_SPECS = re.compile(r"\{(?:VERSION(?::[^}]*)?|YYYY|MM|DD)\}")
# A glob's wildcards as TFX turns them into a regex (utils._glob_to_regex): no "/" matched.
_GLOB_TOKEN = re.compile(r"\*|\?|\[[^\]]*\]|.", re.DOTALL)


class SpanPatternError(parser.InputDataError):
    """A span pattern TFX would refuse, or whose files name no span; one sentence."""

    def __init__(self, pattern: str, problem: str) -> None:
        super().__init__(f"The span pattern {pattern!r} {problem}.")
        self.problem = problem  # for callers that name the pattern their own way


def has_span(pattern: str) -> bool:
    return bool(_SPEC.search(pattern))


def check_pattern(pattern: str) -> None:
    """Refuses what TFX's driver would, before anything runs (SpanPatternError)."""
    specs = list(_SPEC.finditer(pattern))
    other = _OTHER_SPECS.search(pattern)
    if other:
        problem = f"has {other.group(0)}; nmt numbers spans with {{SPAN}} only"
    elif not specs:
        return
    elif len(specs) > 1:
        problem = f"has {{SPAN}} {len(specs)} times; it may appear once"
    elif "/" in pattern[specs[0].end():]:
        problem = "has {SPAN} in a directory; it must be in the file name"
    elif (width := specs[0].group("width")) is not None and not (
            width.isdigit() and int(width) > 0):
        problem = f"has {specs[0].group(0)}; a width must be a positive whole number"
    elif width is None and pattern[:specs[0].start()].endswith("*"):
        # TFX's regex gives the wildcard every character, the span none: no file would match.
        problem = ("has * right before {SPAN}, which leaves TFX no digits to read as the span; "
                   "put a fixed character between them")
    else:
        return
    raise SpanPatternError(pattern, problem)


def files_glob(pattern: str) -> str:
    """The glob every span's files match: `{SPAN}` becomes `*`."""
    return _SPEC.sub("*", pattern)


def fill(pattern: str, span: int) -> str:
    """The pattern of one span's files, zero padded to `{SPAN:WIDTH}`."""
    width = _SPEC.search(pattern).group("width")
    return _SPEC.sub(str(span).zfill(int(width or 0)), pattern, count=1)


def _glob_regex(glob: str) -> str:
    return "".join("[^/]*" if token == "*" else "[^/]" if token == "?"
                   else token if token.startswith("[") and len(token) > 1 else re.escape(token)
                   for token in _GLOB_TOKEN.findall(glob))


def find_spans(pattern: str, paths: Iterable[str]) -> dict[int, list[str]]:
    """Each span's files among `paths` (those `files_glob(pattern)` matches), by span number;
    SpanPatternError for a file whose name holds no span number."""
    check_pattern(pattern)
    spec = _SPEC.search(pattern)
    width = spec.group("width")
    # Greedy as TFX's, or exactly WIDTH characters.
    regex = re.compile(_glob_regex(pattern[:spec.start()])
                       + (f"(?P<span>.{{{width}}})" if width else "(?P<span>.*)")
                       + _glob_regex(pattern[spec.end():]))
    found: dict[int, list[str]] = {}
    for path in sorted(paths):
        match = regex.fullmatch(path)
        token = match.group("span") if match else None
        if token is None or not token.isdigit() or fill(spec.group(0), int(token)) != token:
            written = f"{width} digits" if width else "a whole number without leading zeros"
            raise SpanPatternError(pattern, f"matches {path!r}, which has no span number where "
                                            f"{spec.group(0)} is ({written}, e.g. "
                                            f"{fill(pattern, 7)!r})")
        found.setdefault(int(token), []).append(path)
    return found


def in_span_order(pattern: str, paths: Iterable[str]) -> list[str]:
    """`paths` oldest span first, by path within a span: the order in which a sentence's
    references are kept (span 9's before span 10's, although "fra-10" sorts first)."""
    paths = list(paths)
    span_of = {path: span for span, found in find_spans(pattern, paths).items()
               for path in found}
    return sorted(paths, key=lambda path: (span_of[path], path))


def newest(found: Iterable[int], count: int, latest: int | None = None) -> list[int]:
    """The newest `count` span numbers (fewer if there are not as many), oldest first; only
    those up to `latest` if given (the span TFX's driver resolved)."""
    return sorted(span for span in found if latest is None or span <= latest)[-count:]


def format_spans(spans: Iterable[int]) -> str:
    """[3, 4] -> "3,4": how ML Metadata records the spans read."""
    return ",".join(map(str, spans))


def parse_spans(text: str) -> list[int]:
    return [int(span) for span in text.split(",")]
