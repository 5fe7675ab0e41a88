"""The Megatron-LM cluster backends (ECHO, UltraEP, MoonEP) and their shared layer."""
