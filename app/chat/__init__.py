"""A chat turn: the engine that runs local (runner process) and remote replies, the reply's
reasoning split, sampling presets and the runner queue. Below it: inference/, remote/, conversations/."""
