"""sacreBLEU's signatures of the scores the project prints, so every BLEU and chrF names how it
was computed and against how many references (sacreBLEU's defaults throughout: 13a
tokenization, mixed case, exponential smoothing; chrF with character 6-grams)."""
from __future__ import annotations

import sacrebleu


def signature(kind: str, num_refs: int) -> str:
    """'bleu' or 'chrf' against `num_refs` references per sentence (0: a varying number), e.g.
    'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.4.3'."""
    metric = {"bleu": sacrebleu.BLEU, "chrf": sacrebleu.CHRF}[kind]()
    metric.num_refs = num_refs or -1  # what sacreBLEU sets once it has read the references
    return metric.get_signature().format()
