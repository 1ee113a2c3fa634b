"""Every attention of a run for one input, for the explorer page (`attnlab serve`), `attnlab plot explore` and
`Run.explore`.

The run's family records it: its row's explorer hooks (`attnlab.families.base.Explorer`, in the family's own
module) know which maps its models have, and `attnlab.families.explorer` holds what they record with and what they
return. Here the recording becomes an `attnlab.runs.views.Exploration`, the recording with its views; a family
without explorer hooks is refused, naming the families that have them.
"""

from __future__ import annotations

from attnlab.families.base import LoadedRun
from attnlab.families.table import explorer
from attnlab.runs.views import Exploration


def explore_run(run: LoadedRun, sentence: str, sentence_b: str | None = None, beam: int | None = None,
                max_new: int = 40, translator=None) -> Exploration:
    """The exploration of one input of a loaded run of any family with attention: a translation run (beam: the
    run's by default; `translator`: a ready `attnlab.decode.translate.Translator` of it), a language model (sentence is
    the prompt) or a sentence-pair run (sentence and sentence_b)."""
    hooks = explorer(run.family, run.run_dir)
    return Exploration.of(hooks.explore(run, sentence, sentence_b, beam, max_new, translator))
