"""`attnlab.decode.sampling.generate` never samples the tokenizer's control pieces (a newline's piece, GPT-2's "Ċ"),
unless asked with control=True (`attnlab generate --control`, issue 47): a model that puts almost all its mass on a
control piece gets the next most likely piece by default, and the control piece when asked."""

from types import SimpleNamespace

import torch

from attnlab.data.tokenizers import EOS_ID
from attnlab.decode.sampling import generate

V, NEWLINE, WORD = 8, 5, 6


class Favouring:
    """A language model of V tokens whose next-token distribution is fixed: NEWLINE 0.9, WORD 0.09, the rest
    shared."""

    cfg = SimpleNamespace(max_len=64)

    def init_state(self, num, device):
        return None

    def step(self, ids, state):
        p = torch.full((ids.size(0), V), 0.01 / (V - 2))
        p[:, NEWLINE], p[:, WORD] = 0.9, 0.09
        return p.log(), state, None


TOKENIZER = SimpleNamespace(encode=lambda text: [], control_ids=(NEWLINE,),
                            decode=lambda ids: "".join("\n" if i == NEWLINE else "w" if i == WORD else "?"
                                                       for i in ids if i != EOS_ID))


def test_control_pieces_are_sampled_only_when_asked():
    default = generate(Favouring(), TOKENIZER, num=4, max_len=12, temperature=0.0, seed=1)
    assert all(NEWLINE not in s.tokens and s.tokens[0] == WORD and "\n" not in s.text for s in default)
    asked = generate(Favouring(), TOKENIZER, num=4, max_len=12, temperature=0.0, seed=1, control=True)
    assert all(s.tokens[0] == NEWLINE and "\n" in s.text for s in asked)
