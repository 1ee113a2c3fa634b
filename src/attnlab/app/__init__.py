"""What people use: the command line (`cli` the entry point, `parser` its grammar on the shared `options`,
`commands` what each command does), the Python API (`api`), the web server (`server`, with its HTTP guards
`guards`), the HTML report (`report`) and the series study (`study`). A run in use and the one run pipeline they all
go through are `attnlab.runs`."""
