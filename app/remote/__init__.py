"""OpenAI-compatible servers the user adds as models (vLLM, TGI, llama.cpp, Ollama): their registry and
the HTTP client. Sits below chat/: the engine answers SERVER/MODEL through it."""
