"""One module per command: a public function that takes typed values and returns an exit status."""
