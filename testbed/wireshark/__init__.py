"""The router protocol in Wireshark and tshark: the Lua dissector ``tb.lua`` (shipped as package data), where
it is and how a run's captures are opened with it (docs/wireshark.md)."""
