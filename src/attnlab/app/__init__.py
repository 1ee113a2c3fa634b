"""What people use: the command line (`cli`), the Python API (`api`), the web server (`server`), the HTML report
(`report`), the attention explorer (`explore`, `views`), the series study (`study`) and the one run pipeline every
family goes through (`workflow`: train, load, evaluate, export)."""
