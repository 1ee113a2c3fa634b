"""attnlab: attention-based sequence models to train, compare and look inside.

The Python API (`attnlab.app.api`)::

    import attnlab
    run = attnlab.load("runs/demo")        # a trained run directory
    run = attnlab.load("pretrained:bahdanau")   # a model that ships trained (attnlab.pretrained_models())
    run.translate("And God said, Let there be light")
    run.explore("And God said, Let there be light")   # the attention explorer, inline in a notebook
    attnlab.train("demo", out="runs/mine", train__max_minutes=2)
    attnlab.show(weights, src_tokens, tgt_tokens)    # any attention tensor
"""

__version__ = "0.1.0"

from attnlab.app.api import (ConfigInfo, Run, config_path, configs, corpus, load, pretrained_models, show,  # noqa: E402
                             train)
from attnlab.core.errors import AttnlabError  # noqa: E402
from attnlab.runs.views import Exploration  # noqa: E402

__all__ = ["AttnlabError", "ConfigInfo", "Exploration", "Run", "config_path", "configs", "corpus", "load",
           "pretrained_models", "show", "train", "__version__"]
