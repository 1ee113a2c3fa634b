"""The ground floor: what every other room uses and that knows no model. The error type of user mistakes
(`errors`), the typed config schema and its
loading (`config`), safe file handling (`fileio`), devices and precision (`devices`), logging and the metrics log
(`logs`), BLEU and chrF (`metrics`), the one checkpoint format (`checkpoint`: safetensors plus JSON), per-layer
summaries (`summary`) and plots (`plotting`). Imports nothing else from attnlab."""
