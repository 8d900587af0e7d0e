"""Text to speech: pocket-tts's whole model as one ExecuTorch program and the runner that speaks
with it. contract.py is the program's contract (its methods and settings: what any runner follows);
program.py builds and lowers it; runner.py speaks; voices.py reads and writes voices."""
