"""The persistent shell: its protocol, its guard (it dies with Herald), and terminal next to the script."""
