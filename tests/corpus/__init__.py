"""The labelled corpus of tool-call traces and the recorder that makes it."""
