"""The deploy gate: level 1 (smoke) and level 2 (correctness) against a running server, what a deploy
runs inside the serving container before it keeps a release (`sparkserve level 1|2`)."""
