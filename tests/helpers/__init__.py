"""What the tests share: generated GGUF files, the local hub server, OpenAI-compatible peers, the GUI
session."""
