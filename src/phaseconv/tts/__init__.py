"""Text to speech: pocket-tts's whole model as one ExecuTorch program and the runner that speaks
with it. contract.py is the program's contract (its methods and settings: what any runner follows);
source.py loads the pocket-tts model it is built from; build.py builds and lowers it; loaded.py
loads a program to speak with; speaker.py speaks; voices.py reads and writes voices; tts_model.py is
pocket-tts's Python API (TTSModel) on a program."""

from phaseconv.tts.tts_model import TTSModel, VoiceState, export_model_state

__all__ = ["TTSModel", "VoiceState", "export_model_state"]
