"""The one run pipeline every family goes through, and a run in use, between the families and the ways in
(`attnlab.app`): a run for use (`run`: `load` -> `Run` to translate, explore, generate and evaluate; `train`,
`corpus`, `show`, the packaged configs), every attention map of one input (`explore`) and its views (`views`: the
explorer page inline in a notebook, its script modules joined into one by `script`, the files of `plot explore`),
the pipeline (`workflow`: train, resume, average, load, evaluate, export, import, summary), the compact run format
the trained models ship in and the shipped models themselves (`shipped`), the checks at the entry of the Python
API's public functions (`checks`), and the lecture notebooks' exercise checks (`lessons`)."""
