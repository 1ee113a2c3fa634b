"""Compatibility fixes for JoeyNMT 2.3.0 with current libraries, applied to the installed package (run by
setup_joeynmt.sh with JoeyNMT's venv python). Each fix replaces one exact piece of JoeyNMT's source; it is
idempotent, and fails loudly when neither the original nor the patched text is found (another JoeyNMT version).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# (file in the joeynmt package, why, original text, replacement)
FIXES = [
    ("builders.py",
     "no scheduler configured (constant learning rate): 2.3.0 raises 'Invalid scheduler' for scheduling = None",
     '    else:\n        raise ConfigurationError(\n            "Invalid scheduler. Valid options:',
     '    elif scheduler_name is not None:\n        raise ConfigurationError(\n            "Invalid scheduler. Valid options:'),
    ("builders.py",
     "scheduling = plateau: torch >= 2.7 removed ReduceLROnPlateau's `verbose` argument",
     '            "mode": scheduler_mode,\n            "verbose": False,\n',
     '            "mode": scheduler_mode,\n'),
    ("tokenizers.py",
     "sentencepiece >= 0.2.1 has no SetVocabulary; without it, pieces outside JoeyNMT's vocabulary become <unk> "
     "instead of being split further (no difference when the vocabulary lists every piece of the model)",
     "        self.spm.SetVocabulary(vocab._itos)  # pylint: disable=protected-access\n",
     '        if hasattr(self.spm, "SetVocabulary"):\n'
     "            self.spm.SetVocabulary(vocab._itos)  # pylint: disable=protected-access\n"),
]


def main() -> None:
    spec = importlib.util.find_spec("joeynmt")
    if spec is None or spec.origin is None:
        sys.exit("joeynmt is not installed in this python")
    package = Path(spec.origin).parent
    for name, why, old, new in FIXES:
        path = package / name
        text = path.read_text(encoding="utf-8")
        unpatched = text.count(old) - new.count(old) * text.count(new)  # a replacement may contain `old`
        if unpatched == 1:  # (`new` may itself be part of `old`, as when a line is deleted)
            path.write_text(text.replace(old, new), encoding="utf-8")
            print(f"patch_joeynmt: {name}: patched ({why})")
        elif unpatched == 0 and new in text:
            print(f"patch_joeynmt: {name}: already patched ({why})")
        else:
            sys.exit(f"patch_joeynmt: {name}: expected text not found once; is this JoeyNMT 2.3.0? ({why})")


if __name__ == "__main__":
    main()
