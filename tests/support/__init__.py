"""Shared builders, references and harnesses for the tests: every helper more than one test module
uses lives here, and no ``test_*`` module imports another (``tests/test_layout.py`` checks it).

- ``jobs``: job ids, reading a sink back, the word count every runtime test reuses;
- ``windows`` and ``joins``: event-time jobs on Spark, their generated input and how to read results;
- ``reference``: RIP-58's event-time rules in plain Python and pandas, nothing of rstream's;
- ``inprocess``: operators run in this process (no Spark) and their shared builders;
- ``partials``: combining before the shuffle, in this process: phases run until idle, flows, latest state;
- ``widgets``: the toolkit's fixtures' jobs and inputs;
- ``notebooks``: what an executed workshop notebook must show, and the environment before Spark;
- ``processes``: subprocesses in their own group (the cluster tests' drivers), and what they left running;
- ``cluster``: the input the cluster test's driver sends, shared by the test and that driver;
- ``four_operators``: union, ``.late()``, the interval join and the stream–table join in one job, its
  input, the script that runs it to be killed, and its references;
- ``files``: the repository's own files (those git tracks), never a learner's leftovers beside them;
- ``exercises`` and ``graded``: the shortcuts tried on the graded exercises, the hints a run may not show,
  and a stand-in for a job.

Nothing here imports pyspark at import time, so ``tests/processors`` and ``tests/time`` run without it."""
