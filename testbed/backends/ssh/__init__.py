"""The ssh backend: real lab machines from an Ansible inventory (docs/lab-hardware.md)."""
