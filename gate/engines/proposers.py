"""One proposer per speculation method, behind one interface: what proposes the draft tokens, as the in-process
engines run it and as the distribution check's draft-side tests recompute it (vLLM's ``v1/spec_decode/``: one
proposer per method behind one ``propose()``).

* :class:`DraftModel` (``draft_model``): a separate causal LM.  Its full distribution ``q`` at each position is what
  the check's ``draft_top``, ``draft_logprob`` and ``draft_ratio`` read.
* :class:`NgramLookup` (``ngram``): the longest n-gram of the context's end (n from the maximum down to the minimum
  length) that occurred earlier in the context, at its earliest such occurrence, and up to k tokens that followed it
  there.  It is a deterministic function of the context, so the check recomputes it at every sampled position;
  ``q`` is the proposal as a point mass (``ngram_top``; the target's own top token stands in where it proposes
  nothing, which keeps the statistic a zero-mean martingale).  transformers' prompt lookup engine
  (gate/engines/hf_assisted.py) proposes with this class too, so the lookup exists once.
* :class:`Head` (``eagle``, ``eagle3``, ``mtp``, ``medusa``): a module on the target's hidden states, named in
  ``speculation.head`` and never loaded here.
* :class:`NotHere` (``suffix``, ``other``, and a draft model that is not loaded here): nothing the gate can
  recompute.

The last two get the target-side tests only (``target_top``, ``target_logprob``: ``q = p``).

**One set of n-gram lengths.**  The lookup's lengths are the config's (``speculation.prompt_lookup_min`` and
``prompt_lookup_max``), else those on the launch line of a server the gate launches, else vLLM's own defaults: 5
and 5 (``vllm/config/speculative.py`` sets both to 5 where neither is given, and one given alone stands for both).
The engine and the check both take them from :meth:`NgramLookup.of`, so with no lengths configured the check
recomputes the lookup that ran.  transformers' own prompt lookup matches from ``max_matching_ngram_size`` (default 2)
down to 1: ``prompt_lookup_min: 1, prompt_lookup_max: 2`` is that lookup.

**Adding a method's proposer** (and so its draft-side test) is one class: subclass :class:`Proposer`, name the
methods it proposes for (``methods``) and the check's tests that read it (``tests``, ``families``), build it from a
config (:meth:`Proposer.of`), say what it proposes (:meth:`Proposer.propose`) and what stands for ``q`` at each
sampled position (:meth:`Proposer.q`, and :meth:`Proposer.outcomes` on a served target's top-k), and call
:func:`register`.  Engines and checks look a method's proposer up with :func:`proposer_for`, never by its name.
(What each serving stack calls a method lives in gate/inputs/methods.py; a later change moves it to gate/stacks/,
one module per stack.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, ClassVar

import torch

if TYPE_CHECKING:
    from gate.engines.scoring import Scorer
    from gate.inputs.config import Config

Item = tuple[tuple[int, ...], tuple[int, ...]]  # (prompt ids, sampled ids)
# A served target's sampled row: prompt ids, sampled ids, their log-probabilities, each position's top-k (id: logprob)
Row = tuple[tuple[int, ...], list[int], list[float], list[dict[int, float]]]

# The distribution check's tests (gate/checks/distribution.py computes them) and its planted families
DRAFT_TESTS = ("pit_ks", "draft_top", "draft_logprob", "draft_ratio")
# With q = p, the martingale statistics look at the target's own top token and log-probability; the ratio statistic
# is constant (1/2) when q = p, so it has no target form
TARGET_TESTS = ("pit_ks", "target_top", "target_logprob")
# For a point mass q only the top statistic means anything
NGRAM_TESTS = ("pit_ks", "ngram_top")
FAMILIES = ("toward_draft", "sharpened")
# vLLM's prompt_lookup_min and prompt_lookup_max where neither is given (vllm/config/speculative.py)
NGRAM_DEFAULT = (5, 5)


def ranked(top: dict[int, float]) -> list[int]:
    """A served position's top-k token ids, most likely first: the outcomes by rank (the rest of the vocabulary is
    one more outcome after them)."""
    return sorted(top, key=top.get, reverse=True)


class Proposer:
    """What proposes a method's draft tokens.  The defaults are a proposer the gate cannot recompute: it proposes
    nothing here, and ``q`` is the target's own ``p`` (the target-side tests)."""

    methods: ClassVar[tuple[str, ...]] = ()
    tests: ClassVar[tuple[str, ...]] = TARGET_TESTS
    families: ClassVar[tuple[str, ...]] = ("sharpened",)
    # how the served check's findings say what the tests compared with
    scoring: ClassVar[str] = ("no draft here, so the tests look at the target's own top token and log-probability "
                              "instead of the draft's")

    @classmethod
    def of(cls, config: Config, draft: Scorer | None = None) -> Proposer:
        """This method's proposer for ``config``; ``draft``: the draft model, where it is loaded here."""
        return cls()

    @property
    def note(self) -> str | None:
        """What the check's findings say of the proposer (None: nothing to say)."""
        return None

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` draft tokens after ``context`` (the greedy proposal; none where it proposes nothing)."""
        return []

    def q(self, chunk: list[Item], ps: list[torch.Tensor],
          softmax: Callable[[int, torch.Tensor], torch.Tensor]) -> list[torch.Tensor]:
        """Per item of ``chunk``, the rows [positions, V] that stand for ``q`` at each sampled position, given the
        target's rows ``ps`` (``softmax``: the run's sampling as applied to a row of logits)."""
        return ps

    def outcomes(self, rows: list[Row], width: int) -> torch.Tensor | None:
        """On a served target's outcomes (each position's top-k by rank, then the rest of the vocabulary), ``q`` as
        [positions, width]; None: ``q = p``."""
        return None


class NotHere(Proposer):
    """A proposer the gate cannot recompute here (suffix decoding, any other; a draft model not loaded here)."""

    methods = ("suffix", "other")

    def __init__(self, why: str):
        self.why = why

    @classmethod
    def of(cls, config, draft=None):
        m = config.method
        return cls(f"the {m.name} proposer ({m.doc}) cannot be recomputed here")

    @property
    def note(self) -> str:
        return f"target-side tests only: {self.why}"


class Head(NotHere):
    """A head or module on the target's hidden states (EAGLE, EAGLE-3, MTP, Medusa): named by its path
    (``speculation.head``) for the change trigger and the fingerprint, never loaded, so never recomputed."""

    methods = ("eagle", "eagle3", "mtp", "medusa")


class DraftModel(Proposer):
    """A separate causal LM with the target's vocabulary, loaded here."""

    methods = ("draft_model",)
    tests = DRAFT_TESTS
    families = FAMILIES
    scoring = "the draft loaded here"

    def __init__(self, scorer: Scorer):
        self.scorer = scorer

    @classmethod
    def of(cls, config, draft=None):
        if draft is None:
            return NotHere("the draft model is not loaded here (models.local_weights)")
        return cls(draft)

    @torch.inference_mode()
    def propose(self, context, k):
        ids = list(context)
        model, device = self.scorer.model, self.scorer.device
        for _ in range(k):
            ids.append(int(model(input_ids=torch.tensor([ids], device=device)).logits[0, -1].argmax()))
        return ids[len(context):]

    def q(self, chunk, ps, softmax):
        return [x for x in self.scorer.logits_rows(chunk, softmax) if x is not None]

    def outcomes(self, rows, width):
        order = [[ranked(top) for top in r[3]] for r in rows]

        def reduce(i: int, logits: torch.Tensor) -> torch.Tensor:
            """Item i's draft distributions (T = 1, as the server's prompt logprobs) on its outcomes: [positions,
            width], never [positions, vocabulary] for every item at once."""
            full = torch.softmax(logits.double(), -1).cpu()
            q = torch.zeros(len(order[i]), width, dtype=torch.float64)
            for j, ids in enumerate(order[i]):
                q[j, :len(ids)] = full[j, ids]
                q[j, -1] = max(0.0, 1.0 - float(q[j, :len(ids)].sum()))
            return q

        q = torch.cat([x for x in self.scorer.logits_rows([(r[0], tuple(r[1])) for r in rows], reduce)
                       if x is not None])
        return q / q.sum(1, keepdim=True).clamp(min=1e-300)


class NgramLookup(Proposer):
    """n-gram lookup in the context (prompt lookup decoding), with match lengths ``min_n`` to ``max_n``."""

    methods = ("ngram",)
    tests = NGRAM_TESTS
    families = FAMILIES
    scoring = "the n-gram lookup recomputed here"

    def __init__(self, min_n: int = NGRAM_DEFAULT[0], max_n: int = NGRAM_DEFAULT[1]):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"n-gram lengths: expected 1 <= min <= max, got {min_n} and {max_n}")
        self.min_n, self.max_n = min_n, max_n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NgramLookup) and (self.min_n, self.max_n) == (other.min_n, other.max_n)

    def __hash__(self) -> int:
        return hash((NgramLookup, self.min_n, self.max_n))

    def __repr__(self) -> str:
        return f"NgramLookup({self.min_n}, {self.max_n})"

    @classmethod
    def of(cls, config, draft=None):
        """The config's lengths, else a launched server's line's, else vLLM's defaults; one given alone stands for
        both (as vLLM takes it)."""
        from gate.inputs.launch import read_launch

        sp = config.speculation
        lo, hi = sp.prompt_lookup_min, sp.prompt_lookup_max
        if lo is None and hi is None:
            for e in config.engines:
                launched = e.server_launch()
                if launched is None:
                    continue
                try:
                    lo, hi = read_launch(*launched).lookup
                except ValueError:  # validate reports an unreadable line
                    continue
                if lo is not None or hi is not None:
                    break
        return cls(lo or hi or NGRAM_DEFAULT[0], hi or lo or NGRAM_DEFAULT[1])

    @property
    def note(self) -> str:
        return (f"n-gram lookup recomputed at every sampled position (prompt_lookup_min {self.min_n}, "
                f"prompt_lookup_max {self.max_n}): ngram_top counts the emitted token against the lookup's proposal")

    def propose(self, context, k):
        total = len(context)
        for n in range(min(self.max_n, total - 1), self.min_n - 1, -1):
            suffix = list(context[total - n:])
            for start in range(0, total - n):  # the match must end before the context's last token
                if list(context[start:start + n]) == suffix:
                    return list(context[start + n:start + n + k])
        return []

    def firsts(self, prompt: Sequence[int], out: Sequence[int]) -> list[int | None]:
        """At each position of ``out`` after ``prompt``, the first token the lookup proposes there (None: none)."""
        context = list(prompt)
        found: list[int | None] = []
        for token in out:
            proposal = self.propose(context, 1)
            found.append(proposal[0] if proposal else None)
            context.append(token)
        return found

    def q(self, chunk, ps, softmax):
        qs = []
        for (prompt, out), p in zip(chunk, ps):
            q = torch.zeros_like(p)
            for t, prop in enumerate(self.firsts(prompt, out)):
                q[t, prop if prop is not None and prop < p.shape[1] else int(p[t].argmax())] = 1.0
            qs.append(q)
        return qs

    def outcomes(self, rows, width):
        out = []
        for prompt, tokens, _, tops in rows:
            for prop, top in zip(self.firsts(prompt, tokens), tops):
                q = torch.zeros(width, dtype=torch.float64)
                q[(ranked(top).index(prop) if prop in top else width - 1) if prop is not None else 0] = 1.0
                out.append(q)
        return torch.stack(out) if out else torch.zeros(0, width, dtype=torch.float64)


_PROPOSERS: dict[str, type[Proposer]] = {}


def register(cls: type[Proposer]) -> type[Proposer]:
    """Make ``cls`` the proposer of each method it names."""
    for method in cls.methods:
        _PROPOSERS[method] = cls
    return cls


for _cls in (DraftModel, NgramLookup, Head, NotHere):
    register(_cls)


def proposer_for(config: Config, draft: Scorer | None = None) -> Proposer:
    """The proposer of ``config``'s speculation method (``draft``: the draft model, where it is loaded here)."""
    return _PROPOSERS.get(config.method.name, NotHere).of(config, draft)


__all__ = ["DRAFT_TESTS", "FAMILIES", "NGRAM_DEFAULT", "NGRAM_TESTS", "TARGET_TESTS", "DraftModel", "Head", "Item",
           "NgramLookup", "NotHere", "Proposer", "Row", "proposer_for", "ranked", "register"]
