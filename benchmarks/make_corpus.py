"""A synthetic K x fra.txt corpus for the scaling benchmark (benchmarks/scale.py, issue #28).

Usage: python benchmarks/make_corpus.py --source ../shared/data/fra-eng/fra.txt --copies 16 \
           --out /work/scale_data/fra_x16 [--gzip] [--seed 0] [--lines 5000]

Writes OUT/part-00000.txt .. part-{K-1}.txt (or .txt.gz), one file per copy, each in fra.txt's
line format (English TAB French [TAB attribution ...], the columns after French unchanged):

* copy 0 is fra.txt itself, byte for byte (or the --lines sample of it);
* every later copy rewrites each English sentence into one that is not yet in the corpus,
  and all its French references the same way, so the number of references per English
  sentence is fra.txt's and the line lengths are roughly its (a name is ~6 characters):
  - person and city names that fra.txt writes the same in both languages (Tom, Mary, John,
    Boston, Tokyo...: NAMES below, with the French spellings some references use, e.g.
    Mary -> Marie, Tom -> Thomas) become synthetic names, one per name, in the English
    sentence and in every reference;
  - digit runs of value >= 2 become other numbers of as many digits (0 and 1 are kept, so
    that singular and plural still agree), the same run to the same number on both sides,
    but only if every reference writes them as digits too (not "trente") and they are not
    part of a time (5:30);
  - a sentence with neither gets a synthetic name as a vocative before its final
    punctuation, in English and in every reference: "Go." -> "Go, Zarik." / "Va, Zarik !";
  - if the result is already in the corpus, other names are drawn (and after a few tries a
    vocative is added, then brand-new names are used, which always ends the search).
  All lines of one English sentence get the same rewrite within a copy.

Synthetic names are pseudo-words of 2-3 syllables, never a word of fra.txt. They are drawn
from a pool that grows with the corpus, as a real vocabulary does: a draw is a new name with
probability d/dn of A * n^BETA (n = draws so far: Heaps' law, about A * n^BETA names after n
draws), otherwise a copy of a uniformly chosen earlier draw (preferential attachment, so name
frequencies are Zipf-like). Everything is deterministic given --seed, and copy k depends only
on copies < k: the 4x corpus is the first four parts of the 16x one.

The output directory holds only the parts (`nmt run --data OUT` reads every file in it); the
counts go to OUT.manifest.json beside it. The corpus is written to OUT.tmp and renamed when
complete, so a directory OUT is always a finished corpus.

Memory: one copy's sentence -> rewrite table, the set of English sentences of the whole
corpus (about 300 MB at 16x) and the set of distinct words.
"""
from __future__ import annotations

import argparse
import array
import gzip
import itertools
import json
import math
import os
import random
import re
import shutil
import sys
import time
import zlib
from typing import Iterator

# Names that fra.txt keeps in the French references (counted on fra.txt: e.g. Tom 14,562 of
# 14,639 English lines, Boston 615 of 616), with the other French spellings its references
# use for them. Countries are left out: French puts an article before them (la France).
NAMES: dict[str, tuple[str, ...]] = {
    # people
    "Tom": ("Thomas",), "Mary": ("Marie", "Maria"), "John": ("Jean",), "Alice": (),
    "Jackson": (), "Smith": (), "Bill": (), "Scott": (), "Helen": (), "Harry": (),
    "Wilson": (), "Jim": (), "Ken": (), "Mike": (), "Bob": (), "Jane": (), "Lucy": (),
    # cities
    "Boston": (), "Tokyo": ("Tôkyô",), "Paris": (), "Kyoto": ("Kyôto",), "Osaka": ("Ôsaka",),
    "Chicago": (), "Rome": (), "Kobe": (), "Nagoya": (), "Nara": (), "Yokohama": (),
    "Berlin": (), "Ankara": (), "Nagasaki": (), "Narita": (), "Saitama": (), "Dallas": (),
    "Madrid": (), "Hiroshima": (), "Chiba": (), "Sydney": (), "Bangkok": (), "Milan": (),
    "Atlanta": (), "Birmingham": (),
}
_NAME_RE = re.compile(r"\b(" + "|".join(sorted(NAMES, key=len, reverse=True)) + r")\b")
_ALIAS = {alias: name for name, aliases in NAMES.items() for alias in aliases}
_FRENCH_NAME_RE = re.compile(
    r"\b(" + "|".join(sorted([*NAMES, *_ALIAS], key=len, reverse=True)) + r")\b")
_DIGITS_RE = re.compile(r"\d+")
# What ends a sentence: spaces (incl. French no-break ones), . ! ? … ; : and closing quotes.
_TAIL_RE = re.compile(r"[\s\u00a0\u202f.!?…;:\"»”’)\]]*$")

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "b", "d", "k",
           "l", "m", "n", "r", "s", "t", "br", "tr", "ch", "j")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "i", "o", "a", "ou")
_CODAS = ("", "", "", "", "", "", "n", "r", "l", "k", "s", "m")
_RETRIES = 8  # name draws before a vocative is added, and again before new names are forced


def _words(text: str) -> Iterator[str]:
    return (w.strip(".,!?;:\"'«»()…").lower() for w in text.split())


class NamePool:
    """Synthetic names: Heaps-like growth of the pool, Zipf-like reuse (module docstring)."""

    def __init__(self, rng: random.Random, heaps_a: float, heaps_beta: float,
                 forbidden: set[str]) -> None:
        self.rng = rng
        self.a, self.beta = heaps_a, heaps_beta
        self.forbidden = forbidden  # lower-cased words of the source: never a name
        self.names: list[str] = []
        self.draws = array.array("I")  # the index of every name drawn so far

    def _invent(self) -> int:
        while True:
            syllables = self.rng.choice((2, 2, 2, 2, 2, 3))
            name = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS)
                           + self.rng.choice(_CODAS) for _ in range(syllables)).capitalize()
            if name.lower() not in self.forbidden:
                self.forbidden.add(name.lower())
                self.names.append(name)
                return len(self.names) - 1

    def draw(self, fresh: bool = False) -> str:
        n = len(self.draws)
        p_new = 1.0 if n == 0 else min(1.0, self.a * self.beta * n ** (self.beta - 1.0))
        if fresh or self.rng.random() < p_new:
            index = self._invent()
        else:
            index = self.draws[self.rng.randrange(n)]
        self.draws.append(index)
        return self.names[index]


def _new_number(run: str, rng: random.Random) -> str:
    if int(run) < 2:
        return run
    digits = len(run)
    low = 2 if digits == 1 else 10 ** (digits - 1)
    number = str(rng.randint(low, 10 ** digits - 1))
    return number if not run.startswith("0") else number.zfill(digits)  # 05 stays 2 digits


class Rewrite:
    """One English sentence's rewrite in one copy: names, numbers, vocative."""
    __slots__ = ("names", "numbers", "vocative", "english")

    def __init__(self, names: dict[str, str], numbers: dict[str, str], vocative: str | None,
                 source_english: str) -> None:
        self.names, self.numbers, self.vocative = names, numbers, vocative
        self.english = self.apply(source_english, french=False)

    def apply(self, text: str, french: bool) -> str:
        if self.names:
            if french:
                text = _FRENCH_NAME_RE.sub(
                    lambda m: self.names.get(_ALIAS.get(m.group(1), m.group(1)), m.group(1)),
                    text)
            else:
                text = _NAME_RE.sub(lambda m: self.names.get(m.group(1), m.group(1)), text)
        if self.numbers:
            text = _DIGITS_RE.sub(lambda m: self.numbers.get(m.group(0), m.group(0)), text)
        if self.vocative:
            cut = _TAIL_RE.search(text).start()
            text = f"{text[:cut]}, {self.vocative}{text[cut:]}"
        return text


def _number_runs(english: str, references: list[str]) -> list[str]:
    """The digit runs of value >= 2 to rewrite: not part of a time (5:30), and written as
    digits in every reference (not "trente", "cinq dollars"), else none at all."""
    runs = [m.group(0) for m in _DIGITS_RE.finditer(english) if int(m.group(0)) >= 2
            and ":" not in english[max(0, m.start() - 1):m.end() + 1]]
    runs = list(dict.fromkeys(runs))
    for reference in references:
        if not set(runs) <= set(_DIGITS_RE.findall(reference)):
            return []
    return runs


def plan_rewrite(english: str, references: list[str], pool: NamePool, rng: random.Random,
                 taken: set[str]) -> Rewrite:
    """A rewrite of one English sentence and its references whose English sentence is not in
    `taken` (then added to it)."""
    names_found = list(dict.fromkeys(_NAME_RE.findall(english)))
    runs = _number_runs(english, references)
    attempt = 0
    while True:
        vocative_needed = not (names_found or runs) or attempt >= _RETRIES
        fresh = attempt >= 2 * _RETRIES  # brand-new names: the sentence cannot exist yet
        names: dict[str, str] = {}
        for name in names_found:
            drawn = pool.draw(fresh)
            while drawn in names.values():
                drawn = pool.draw(fresh)
            names[name] = drawn
        numbers = {r: _new_number(r, rng) for r in runs}
        vocative = None
        if vocative_needed:
            vocative = pool.draw(fresh)
            while vocative in names.values():
                vocative = pool.draw(fresh)
        rewrite = Rewrite(names, numbers, vocative, english)
        if rewrite.english not in taken:
            taken.add(rewrite.english)
            return rewrite
        attempt += 1


def _open_out(path: str, use_gzip: bool):
    if use_gzip:
        return gzip.open(path, "wt", encoding="utf-8", newline="", compresslevel=6)
    return open(path, "w", encoding="utf-8", newline="")


def _sample_lines(source: str, lines: int | None) -> Iterator[str]:
    """The source's lines, or about `lines` of them: whole English sentences (all their
    references), chosen by a hash of the sentence, so spread over all lengths."""
    with open(source, encoding="utf-8", newline="") as f:
        if lines is None:
            yield from f
            return
        total = sum(1 for _ in f)
        f.seek(0)
        step = max(1, math.ceil(total / lines))
        for line in f:
            if zlib.crc32(line.split("\t", 1)[0].encode("utf-8")) % step == 0:
                yield line


def make_corpus(source: str, copies: int, out: str, seed: int = 0, use_gzip: bool = False,
                lines: int | None = None, heaps_a: float = 20.0, heaps_beta: float = 0.5,
                log=sys.stderr) -> dict:
    """Writes the corpus (module docstring) and returns its manifest."""
    started = time.monotonic()
    out = os.path.abspath(out)
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    suffix = ".txt.gz" if use_gzip else ".txt"
    rng = random.Random(seed)
    english_seen: set[str] = set()
    words: set[str] = set()
    forbidden: set[str] = set()
    pool = NamePool(random.Random(seed + 1), heaps_a, heaps_beta, forbidden)
    lines_written = 0
    parts = []
    for copy in range(copies):
        copy_started = time.monotonic()
        path = os.path.join(tmp, f"part-{copy:05d}{suffix}")
        rewrites: dict[str, Rewrite] = {}  # this copy's: every line of a sentence the same
        count = 0
        with _open_out(path, use_gzip) as f:
            for english, group in itertools.groupby(_sample_lines(source, lines),
                                                    key=lambda line: line.split("\t", 1)[0]):
                group = list(group)  # one English sentence's lines (fra.txt keeps them together)
                count += len(group)
                if copy == 0:
                    english_seen.add(english)
                    forbidden.update(_words(english))
                    words.update(english.split())
                    for line in group:
                        french = line.split("\t", 2)[1].rstrip("\n")
                        forbidden.update(_words(french))
                        words.update(french.split())
                    f.writelines(group)
                    continue
                columns = [line.split("\t", 2) for line in group]
                rewrite = rewrites.get(english)
                if rewrite is None:
                    rewrite = rewrites[english] = plan_rewrite(
                        english, [c[1] for c in columns], pool, rng, english_seen)
                words.update(rewrite.english.split())
                for line, (_, french, *tail) in zip(group, columns):
                    newline = "\n" if french.endswith("\n") else ""
                    new_french = rewrite.apply(french.rstrip("\n"), french=True)
                    words.update(new_french.split())
                    f.write("\t".join([rewrite.english, new_french + newline, *tail]))
        lines_written += count
        parts.append({"file": os.path.basename(path), "lines": count,
                      "bytes": os.path.getsize(path)})
        print(f"part {copy}: {count:,} lines, {len(english_seen):,} distinct English so far, "
              f"{len(words):,} distinct words, {len(pool.names):,} synthetic names, "
              f"{time.monotonic() - copy_started:.1f} s", file=log, flush=True)
    if os.path.exists(out):
        shutil.rmtree(out)
    os.rename(tmp, out)
    manifest = {
        "source": os.path.abspath(source), "copies": copies, "seed": seed, "gzip": use_gzip,
        "lines_per_copy_requested": lines, "heaps_a": heaps_a, "heaps_beta": heaps_beta,
        "lines_written": lines_written, "distinct_english": len(english_seen),
        "distinct_words": len(words), "synthetic_names": len(pool.names),
        "bytes": sum(p["bytes"] for p in parts), "parts": parts,
        "seconds": round(time.monotonic() - started, 1),
    }
    with open(out + ".manifest.json", "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", default=os.environ.get("FRA_TXT"),
                        help="fra.txt (default: $FRA_TXT)")
    parser.add_argument("--copies", "-k", type=int, required=True, help="K: 1, 4, 16...")
    parser.add_argument("--out", required=True, help="the corpus directory to write")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip", action="store_true", help="write part-KKKKK.txt.gz")
    parser.add_argument("--lines", type=int, default=None,
                        help="about this many lines of the source per copy (whole sentences, "
                             "spread over all lengths): for smoke tests")
    parser.add_argument("--heaps-a", type=float, default=20.0,
                        help="about A * n^BETA synthetic names after n draws (default 20)")
    parser.add_argument("--heaps-beta", type=float, default=0.5, help="default 0.5")
    args = parser.parse_args(argv)
    if not args.source:
        parser.error("--source (or $FRA_TXT) is required")
    if args.copies < 1:
        parser.error("--copies must be at least 1")
    manifest = make_corpus(args.source, args.copies, args.out, args.seed, args.gzip,
                           args.lines, args.heaps_a, args.heaps_beta)
    print(f"{args.out}: {manifest['lines_written']:,} lines written, "
          f"{manifest['distinct_english']:,} distinct English sentences, "
          f"{manifest['distinct_words']:,} distinct words, {manifest['bytes'] / 1e6:.1f} MB, "
          f"{manifest['seconds']:.1f} s")


if __name__ == "__main__":
    main()
