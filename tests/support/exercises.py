"""The shortcuts a learner could take through the graded exercises of notebooks 00 to 07, and how to
try them in a real kernel: each shortcut is spliced into the solution right after its exercise's check cell
(which said "right"), followed by the check again, and the verdict that second check shows must not be "right".

A prediction shortcut first changes the prediction after the run was shown (a prediction run again unchanged
records nothing new, so copying the run's value onto a right prediction made before it would change nothing).

A shortcut is what passed the look-up exercises without the skill: a value typed in, a plain Python or
pandas computation instead of a job, the broken job handed back unchanged, a job never run, a job of the
notebook that answers another question, a prediction written after the run revealed the answer.
"""

from __future__ import annotations

import re
from typing import Any

#: Per notebook (file stem), per exercise: (what the shortcut is, its source). Each runs after the
#: learner's untouched exercise and its check; the check runs again after it.
SHORTCUTS: dict[str, dict[str, list[tuple[str, str]]]] = {
    "01_wordcount": {
        "Exercise 1": [
            ("the prediction written after the run was shown",
             'exercises.predict("Exercise 1", {"batches": 1, "lag_after_first": 0})  # a first guess\n'
             'exercises.reveal("Exercise 1", run_uneven)  # the run is shown\n'
             'exercises.predict("Exercise 1", run_uneven())  # then "predicted" from it'),
            ("the right numbers typed in after the run was shown",
             'exercises.predict("Exercise 1", {"batches": 3, "lag_after_first": 6})'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("a Counter of the new reviews' words in lower case, no job",
             "fixed_job = dict(Counter(word.lower() for review in NEW_REVIEWS for word in review.split()))"),
            ("the counts typed in", 'fixed_job = {"the": 3, "came": 2, "mug": 3, "was": 3}'),
            ("the broken job under a new id, still broken",
             'fixed_job = new_review_words("new-words-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the fixed job, never run",
             'b = StreamBuilder("new-words-unrun", shuffle_queues=2)\n'
             '(b.source("new-reviews", TextDeserializer()).flat_map(str.split).key_by(lambda word: word.lower())\n'
             ' .count().to_rstream().sink("new-words-unrun-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'),
            ("the notebook's word count of the reviews", "fixed_job = job"),
            ("one cause fixed (UTF-8), the other left (words not in lower case)",
             'b = StreamBuilder("new-words-utf8", shuffle_queues=2)\n'
             '(b.source("new-reviews", TextDeserializer()).flat_map(str.split).key_by(lambda word: word)\n'
             ' .count().to_rstream().sink("new-words-utf8-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (lower case), the other left (Latin-1 reads every record)",
             'b = StreamBuilder("new-words-lower", shuffle_queues=2)\n'
             '(b.source("new-reviews", TextDeserializer("latin-1")).flat_map(str.split)\n'
             ' .key_by(lambda word: word.lower()).count().to_rstream()\n'
             ' .sink("new-words-lower-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("counts typed in", 'long_job = {"came": 62, "great": 43, "late": 31}'),
            ("a plain Python count, no job",
             "long_job = {word: n for word, n in python_counts().items() if len(word) >= 4}"),
            ("the notebook's word count (every word, a text sink)", "long_job = job"),
            ("the job of Exercise 2 (the new reviews)", "long_job = broken_job"),
            ("the long-words job, never run",
             'b = StreamBuilder("long-words-unrun")\n'
             '(b.source("reviews", TextDeserializer()).flat_map(str.split).filter(lambda w: len(w) >= 4)\n'
             ' .key_by(lambda w: w).count().to_rstream().sink("long-unrun", JsonSerializer(with_key=True)))\n'
             'long_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'),
            ("a job that counts every word, the short ones too",
             'b = StreamBuilder("all-words", shuffle_queues=2)\n'
             '(b.source("reviews", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()\n'
             ' .to_rstream().sink("all-word-counts", JsonSerializer(with_key=True)))\n'
             'long_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "long_job.run_until_idle(progress=False)"),
        ],
    },
    "02_windows_and_watermarks": {
        "Exercise 1": [
            ("the prediction written after the run was shown",
             'exercises.predict("Exercise 1", {"watermark": 0, "fired": []})  # a first guess\n'
             'exercises.reveal("Exercise 1", run_checkouts)  # the run is shown\n'
             'exercises.predict("Exercise 1", run_checkouts())  # then "predicted" from it'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("the pandas count of the notebook, no job", "fixed_job = expected"),
            ("the fix typed in as a dict", "fixed_job = {k: v for k, v in expected.items()}"),
            ("the broken job under a new id, still broken",
             'fixed_job = page_counts("page-views-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the fixed job, never run",
             'b = StreamBuilder("page-views-unrun", shuffle_queues=2)\n'
             '(b.source("views", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])\n'
             ' .window(TumblingWindow(Time.seconds(10))).count().to_rstream()\n'
             ' .sink("page-views-unrun-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={\n'
             '    "data_dir": str(DATA), "allowed_lateness_ms": LATENESS})'),
            ("one cause fixed (10 s windows), the other left (no key in the sink)",
             'b = StreamBuilder("page-views-nokey", shuffle_queues=2)\n'
             '(b.source("views", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])\n'
             ' .window(TumblingWindow(Time.seconds(10))).count().to_rstream()\n'
             ' .sink("page-views-nokey-counts", JsonSerializer()))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={\n'
             '    "data_dir": str(DATA), "allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000})\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (the key), the other left (10 ms windows)",
             'b = StreamBuilder("page-views-10ms", shuffle_queues=2)\n'
             '(b.source("views", JsonDeserializer()).select_timestamp(lambda e: e["ts"]).key_by(lambda e: e["page"])\n'
             ' .window(TumblingWindow(10)).count().to_rstream()\n'
             ' .sink("page-views-10ms-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={\n'
             '    "data_dir": str(DATA), "allowed_lateness_ms": LATENESS, "idle_timeout_ms": 600_000})\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("a plain Python count, no job",
             'user_job = dict(Counter((e["user"], e["ts"] // 20_000 * 20_000, e["ts"] // 20_000 * 20_000 + 20_000)\n'
             '                        for e in on_time2))'),
            ("the notebook's first job (pages, 10 s)", "user_job = job"),
            ("the per-page job of Exercise 2", "user_job = broken_job"),
        ],
    },
    "03_late_data": {
        "Exercise 1": [
            ("the prediction written after the run was shown",
             'exercises.predict("Exercise 1", [0])  # a first guess\n'
             'exercises.reveal("Exercise 1", run_cid_phone)  # the run is shown\n'
             'exercises.predict("Exercise 1", run_cid_phone())  # then "predicted" from it'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("the notebook's job with 1 s of lateness (counts, not maxima)", "fixed_job = job"),
            ("the late views by the rule, no job", "fixed_job = late_by_rule(1_000)"),
            ("the broken job under a new id, still broken",
             'fixed_job = slowest("slowest-again")\nfixed_job.run_until_idle(progress=False)'),
            ("one cause fixed (event time), the other left (1 ms of lateness)",
             'b = StreamBuilder("slowest-1ms", shuffle_queues=2)\n'
             '(b.source("views", JsonDeserializer()).select_timestamp(lambda v: v["ts"])\n'
             ' .key_by(lambda v: f"server-{v[\'server\']}").window(TumblingWindow(Time.seconds(5)))\n'
             ' .max(lambda v: v["arrival"] - v["ts"]).to_rstream().sink("slowest-1ms-max", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                           properties={"data_dir": str(DATA), "allowed_lateness_ms": 1})\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (1 s of lateness), the other left (the arrival as event time)",
             'b = StreamBuilder("slowest-arrival", shuffle_queues=2)\n'
             '(b.source("views", JsonDeserializer()).select_timestamp(lambda v: v["arrival"])\n'
             ' .key_by(lambda v: f"server-{v[\'server\']}").window(TumblingWindow(Time.seconds(5)))\n'
             ' .max(lambda v: v["arrival"] - v["ts"]).to_rstream().sink("slowest-arrival-max", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                           properties={"data_dir": str(DATA), "allowed_lateness_ms": 1_000})\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("the lateness typed in", "chosen_job = 8_000"),
            ("the rule's pick, no job",
             "chosen_job = next(ms for ms in [0, 500, 1_500, 2_000, 4_000, 8_000, 16_000] if len(late_by_rule(ms)) <= 5)"),
            ("the notebook's what-if with more lateness than needed, no job", "chosen_job = sweep[10_000]"),
            ("the right lateness, never run",
             'chosen_job = RocketMQStream(views_per_window("pick-unrun").build(), broker=broker, spark=spark,\n'
             '                            properties={"data_dir": str(DATA), "allowed_lateness_ms": 8_000})'),
            ("a lateness that is enough but not the smallest",
             'chosen_job = RocketMQStream(views_per_window("pick-16000").build(), broker=broker, spark=spark,\n'
             '                            properties={"data_dir": str(DATA), "allowed_lateness_ms": 16_000})\n'
             "chosen_job.run_until_idle(progress=False)"),
        ],
    },
    "04_state_and_replay": {
        "Exercise 1": [
            ("the prediction written after the run was shown",
             'exercises.predict("Exercise 1", {"messages": 8, "replayed_keys": 4})  # a first guess\n'
             'exercises.reveal("Exercise 1", run_rounds)  # the run is shown\n'
             'exercises.predict("Exercise 1", run_rounds())  # then "predicted" from it'),
            ("the right numbers typed in after the run was shown",
             'exercises.predict("Exercise 1", (5, 3))'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("the balances typed in", 'fixed_job = {"ann": [25, 35], "bob": [-5]}'),
            ("a plain Python running sum over CREDIT_LOG, no job",
             "running, fixed_job = defaultdict(int), defaultdict(list)\n"
             "for move in map(json.loads, CREDIT_LOG):\n"
             '    running[move["user"]] += move["amount"]\n'
             '    fixed_job[move["user"]].append(running[move["user"]])'),
            ("the broken job under a new id, still broken",
             'fixed_job = credit_totals("credit-totals-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the notebook's store credit job (another topic, a text sink)", "fixed_job = job"),
            ("a right job, never run",
             'b = StreamBuilder("credit-totals-unrun")\n'
             '(b.source("credit-log", JsonDeserializer()).key_by(lambda m: m["user"]).sum(lambda m: m["amount"])\n'
             ' .to_rstream().sink("credit-totals-unrun-balances", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'),
            ("one cause fixed (the job's sum), the other left (it starts at the topic's end)",
             'b = StreamBuilder("credit-totals-last")\n'
             '(b.source("credit-log", JsonDeserializer()).key_by(lambda m: m["user"]).sum(lambda m: m["amount"])\n'
             ' .to_rstream().sink("credit-totals-last-balances", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                           properties={"data_dir": str(DATA), "consume_from": "last"})\n'
             "fixed_job.run_until_idle(progress=False)\n"
             'broker.send_batch("credit-log", [json.dumps({"user": "ann", "amount": 10})], progress=False)\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (from the first move), the other left (the balances in a Python dict)",
             'b = StreamBuilder("credit-totals-dict")\n'
             '(b.source("credit-log", JsonDeserializer()).key_by(lambda m: m["user"]).map(add_move)\n'
             ' .to_rstream().sink("credit-totals-dict-balances", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("the overdrawn balances typed in",
             'overdrawn_job = {"ann": [-20, -30], "bob": [-20, -30], "cid": [-5]}'),
            ("a plain Python running sum over MOVES, no job",
             "running, overdrawn_job = defaultdict(int), defaultdict(list)\n"
             "for user, amount in MOVES:\n"
             "    running[user] += amount\n"
             "    if running[user] < 0:\n"
             "        overdrawn_job[user].append(running[user])"),
            ("the notebook's store credit job (all the shop's credit moves, a text sink)", "overdrawn_job = job"),
            ("the job of Exercise 2 (another question, another topic)", "overdrawn_job = broken_job"),
            ("the job, never run",
             'b = StreamBuilder("overdrawn-unrun", shuffle_queues=2)\n'
             '(b.source("moves", JsonDeserializer()).key_by(lambda m: m["user"]).sum(lambda m: m["amount"])\n'
             ' .to_rstream().filter(lambda v: v < 0).sink("overdrawn-unrun", JsonSerializer(with_key=True)))\n'
             'overdrawn_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'),
            ("every balance, not only those below zero",
             'b = StreamBuilder("every-balance", shuffle_queues=2)\n'
             '(b.source("moves", JsonDeserializer()).key_by(lambda m: m["user"]).sum(lambda m: m["amount"])\n'
             ' .to_rstream().sink("every-balance", JsonSerializer(with_key=True)))\n'
             'overdrawn_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "overdrawn_job.run_until_idle(progress=False)"),
            ("the negative moves summed, not the balances that went negative",
             'b = StreamBuilder("negative-moves", shuffle_queues=2)\n'
             '(b.source("moves", JsonDeserializer()).filter(lambda m: m["amount"] < 0).key_by(lambda m: m["user"])\n'
             ' .sum(lambda m: m["amount"]).to_rstream().sink("negative-moves", JsonSerializer(with_key=True)))\n'
             'overdrawn_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "overdrawn_job.run_until_idle(progress=False)"),
        ],
    },
    "05_joins": {
        "Exercise 1": [
            ("the prediction written after the run was shown",
             'exercises.predict("Exercise 1", {"o1": 2})  # a first guess\n'
             'exercises.reveal("Exercise 1", run_sliding)  # the run is shown\n'
             '# then "predicted" by copying what it showed\n'
             'exercises.predict("Exercise 1", {"o1": 1, "o2": 1, "o3": 2, "o4": 2, "o5": 1, "o6": 1, "o7": 1,\n'
             '                                 "o8": 1, "o9": 1, "o10": 1})'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("the answer typed in", 'fixed_job = [("o1", None), ("o2", "gold"), ("o3", "gold")]'),
            ("a plain Python look-up of the profiles, no job",
             'tier_now = {p["user"]: p["tier"] for p in PROFILES + UPDATES}\n'
             'fixed_job = {o["order"]: tier_now.get(o["user"]) for o in NEXT_ORDERS}'),
            ("the broken job under a new id, still broken",
             'fixed_job = order_tiers("order-tiers-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the notebook's enrichment of the clicks (another topic)", "fixed_job = job2"),
            ("a right job, never run",
             'b = StreamBuilder("order-tiers-unrun", shuffle_queues=2)\n'
             'tiers = b.source("profiles", JsonDeserializer()).key_by(lambda p: p["user"]).map(lambda p: p["tier"]).to_table()\n'
             '(b.source("next-orders", JsonDeserializer()).left_join(tiers).where(lambda o: o["user"])\n'
             ' .apply(lambda o, tier: {"order": o["order"], "tier": tier}).sink("unrun-tiers", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties=PROPS)'),
            ("one cause fixed (the table), the other left (an inner join)",
             'b = StreamBuilder("order-tiers-inner", shuffle_queues=2)\n'
             'tiers = b.source("profiles", JsonDeserializer()).key_by(lambda p: p["user"]).map(lambda p: p["tier"]).to_table()\n'
             '(b.source("next-orders", JsonDeserializer()).join(tiers).where(lambda o: o["user"])\n'
             ' .apply(lambda o, tier: {"order": o["order"], "tier": tier}).sink("inner-tiers", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties=PROPS)\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (a left join), the other left (the profiles stream, no table)",
             'b = StreamBuilder("order-tiers-stream", shuffle_queues=2)\n'
             '(b.source("next-orders", JsonDeserializer()).left_join(b.source("profiles", JsonDeserializer()))\n'
             ' .where(lambda o: o["user"]).equal_to(lambda p: p["user"])\n'
             ' .apply(lambda o, p: {"order": o["order"], "tier": p["tier"] if p else None})\n'
             ' .sink("stream-tiers", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties=PROPS)\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("the order ids typed in", 'quick_job = ["o4", "o5", "o6", "o7"]'),
            ("a plain Python computation with the notebook's paid_within, no job",
             'quick_job = sorted(o["order"] for o in ORDERS if paid_within(o, 0, 3_000))'),
            ("the notebook's interval join (a left join, within 5 s)", "quick_job = interval_job"),
            ("the job of Exercise 2 (another question, another topic)", "quick_job = broken_job"),
            ("the job, never run",
             'b = StreamBuilder("paid-quickly-unrun", shuffle_queues=2)\n'
             'qo = b.source("orders", JsonDeserializer()).select_timestamp(lambda o: o["ts"])\n'
             'qp = b.source("payments", JsonDeserializer()).select_timestamp(lambda p: p["ts"])\n'
             '(qo.join(qp).where(lambda o: o["order"]).equal_to(lambda p: p["order"])\n'
             ' .between(Time.seconds(0), Time.seconds(3)).apply(lambda o, p: p["ts"] - o["ts"])\n'
             ' .sink("unrun-quick", JsonSerializer(with_key=True)))\n'
             'quick_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties=PROPS)'),
        ],
    },
    "00_start_here": {
        "Exercise 1": [
            ("the prediction written after the run was shown",
             'exercises.predict("Exercise 1", 2)  # a first guess: one per review\n'
             'exercises.reveal("Exercise 1", run_more)  # the run is shown\n'
             'exercises.predict("Exercise 1", run_more())  # then "predicted" from it'),
            ("the right number typed in after the run was shown", 'exercises.predict("Exercise 1", 10)'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("a Counter of the reviews' words, no job",
             "from collections import Counter\n\n"
             'fixed_job = dict(Counter(w for m in broker.read("reviews") for w in m.body.decode().split()))'),
            ("the counts typed in", 'fixed_job = {"the": 9, "came": 8, "great": 7, "mug": 5}'),
            ("the broken job under a new id, still broken",
             'fixed_job = review_words("review-words-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the fixed job, never run",
             'b = StreamBuilder("review-words-unrun")\n'
             '(b.source("reviews", TextDeserializer()).flat_map(str.split).key_by(lambda word: word).count()\n'
             ' .to_rstream().sink("review-words-unrun-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'),
            ("the notebook's review-words job (a text sink)", "fixed_job = job"),
            ("one cause fixed (the split), the other left (the filter)",
             'b = StreamBuilder("review-words-filtered")\n'
             '(b.source("reviews", TextDeserializer()).filter(lambda review: "great" in review).flat_map(str.split)\n'
             ' .key_by(lambda word: word).count().to_rstream()\n'
             ' .sink("review-words-filtered-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (no filter), the other left (whole reviews)",
             'b = StreamBuilder("review-words-whole")\n'
             '(b.source("reviews", TextDeserializer()).key_by(lambda word: word).count().to_rstream()\n'
             ' .sink("review-words-whole-counts", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("the counts typed in", 'first_job = {"the": 9, "my": 8, "a": 6, "this": 5}'),
            ("a plain Python Counter of the first words, no job",
             "from collections import Counter\n\n"
             'first_job = Counter(m.body.decode().split()[0] for m in broker.read("reviews"))'),
            ("the notebook's review-words job (every word, a text sink)", "first_job = job"),
            ("the broken job of Exercise 2 (whole reviews)", "first_job = broken_job"),
            ("the broken job of Exercise 2 under a new id",
             'first_job = review_words("first-words-again")\nfirst_job.run_until_idle(progress=False)'),
            ("a job that counts every word, not the first ones",
             'b = StreamBuilder("every-word")\n'
             '(b.source("reviews", TextDeserializer()).flat_map(str.split).key_by(lambda w: w).count()\n'
             ' .to_rstream().sink("every-word-counts", JsonSerializer(with_key=True)))\n'
             'first_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})\n'
             "first_job.run_until_idle(progress=False)"),
            ("the first-words job, never run",
             'b = StreamBuilder("first-words-unrun")\n'
             '(b.source("reviews", TextDeserializer()).map(lambda text: text.split()[0]).key_by(lambda w: w)\n'
             ' .count().to_rstream().sink("first-words-unrun-counts", JsonSerializer(with_key=True)))\n'
             'first_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA)})'),
        ],
    },
    "06_scaling_and_failure": {
        "Exercise 1": [
            ("the prediction copied from the run, after it was shown",
             'exercises.predict("Exercise 1", 2)  # a first guess after the run: one per core\n'
             'shown = run_one_queue()  # the run, again\n'
             'exercises.predict("Exercise 1", shown["most executors counting in one batch"])  # then "predicted"'),
            ("the right number typed in after the run was shown", 'exercises.predict("Exercise 1", 1)'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("the reviews upper-cased, no job",
             'fixed_job = [m.body.decode().upper() for m in broker.read("reviews")]'),
            ("the broken job under a new id, still broken",
             'fixed_job = support_feed("support-feed-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the notebook's order count", "fixed_job = job"),
            ("a right job with no crash armed",
             'b = StreamBuilder("support-feed-calm")\n'
             'up = b.source("reviews", TextDeserializer()).map(str.upper)\n'
             'up.sink("support-feed-calm-out", JsonSerializer())\n'
             'up.filter(lambda text: "BROKE" in text).sink("support-feed-calm-broke", JsonSerializer())\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA / "job")})\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (exactly once), the other left (the support queue sent by foreach)",
             'def feed_once(job_id):\n'
             '    broker.create_topic(f"{job_id}-broke", queues=1)\n'
             '    b = StreamBuilder(job_id)\n'
             '    (b.source("reviews", TextDeserializer()).map(str.upper)\n'
             '     .foreach(lambda t: broker.send(f"{job_id}-broke", t) if "BROKE" in t else None)\n'
             '     .sink(f"{job_id}-out", JsonSerializer()))\n'
             '    return RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA / "job")})\n'
             '\n\n'
             'fixed_job = feed_once("support-feed-once")\nfixed_job.crash_once("before_commit")\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (a second sink), the other left (at least once)",
             'b = StreamBuilder("support-feed-alo")\n'
             'up = b.source("reviews", TextDeserializer()).map(str.upper)\n'
             'up.sink("support-feed-alo-out", JsonSerializer())\n'
             'up.filter(lambda text: "BROKE" in text).sink("support-feed-alo-broke", JsonSerializer())\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={\n'
             '    "data_dir": str(DATA / "job"), "processing_guarantee": "at_least_once"})\n'
             'fixed_job.crash_once("before_commit")\nfixed_job.run_until_idle(progress=False)'),
        ],
        "Exercise 3": [
            ("the revenue typed in", 'revenue_job = {"ann": 1200, "bob": 600}'),
            ("a plain Python sum over the orders, no job",
             'revenue_job = Counter()\n'
             'for m in broker.read("orders"):\n'
             '    revenue_job[json.loads(m.body)["user"]] += json.loads(m.body)["amount"]'),
            ("the notebook's order count (it lived through a kill, but counts orders per product)", "revenue_job = job"),
            ("a revenue job run after the loss only (a new id)",
             'b = StreamBuilder("revenue-late", shuffle_queues=4)\n'
             '(b.source("orders", JsonDeserializer()).key_by(lambda o: o["user"]).sum(lambda o: o["amount"])\n'
             ' .to_rstream().sink("revenue-late", JsonSerializer(with_key=True)))\n'
             'revenue_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                             properties={"data_dir": str(DATA / "job")})\n'
             "revenue_job.run_until_idle(progress=False)"),
            ("a revenue job never run (a new id)",
             'b = StreamBuilder("revenue-unrun", shuffle_queues=4)\n'
             '(b.source("orders", JsonDeserializer()).key_by(lambda o: o["user"]).sum(lambda o: o["amount"])\n'
             ' .to_rstream().sink("revenue-unrun", JsonSerializer(with_key=True)))\n'
             'revenue_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                             properties={"data_dir": str(DATA / "job")})'),
            ("the right job after more orders, no new executor lost since its check",
             'broker.send_batch("orders", [json.dumps(o) for o in shop.orders(120_000, 180_000)])\n'
             'revenue_job = RocketMQStream(revenue.build(), broker=broker, spark=spark,  # its id: it goes on\n'
             '                             properties={"data_dir": str(DATA / "job")})\n'
             "revenue_job.run_until_idle(progress=False)"),
        ],
    },
    "07_rocketmq": {
        "Exercise 1": [
            ("the prediction copied from the run, after it was shown",
             'exercises.predict("Exercise 1", {"commits": 1, "commits_with_sink": 1})  # a guess after the run\n'
             'exercises.predict("Exercise 1", run_decided())  # the run again, then "predicted" from it'),
            ("the right numbers typed in after the run was shown",
             'exercises.predict("Exercise 1", {"commits": 3, "commits_with_sink": 1})'),
        ],
        "Exercise 2": [
            ("the broken job handed back", "fixed_job = broken_job"),
            ("the windows counted in plain Python, no job",
             'fixed_job = Counter((o["user"], o["product"], o["ts"] // 30_000 * 30_000) for o in ORDERS)'),
            ("the broken job under a new id, still broken",
             'fixed_job = order_windows("order-windows-again")\nfixed_job.run_until_idle(progress=False)'),
            ("the fixed job, never run", 'fixed_job = order_windows_fixed("order-windows-unrun")'),
            ("the notebook's word count of the reviews", "fixed_job = job"),
            ("one cause fixed (one key), the other left (the born time)",
             'b = StreamBuilder("order-windows-born", shuffle_queues=2)\n'
             '(b.source("order-events", JsonDeserializer()).key_by(lambda o: f"{o[\'user\']}/{o[\'product\']}")\n'
             ' .window(TumblingWindow(Time.seconds(30))).count().to_rstream()\n'
             ' .sink("order-windows-born-out", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA / "job")})\n'
             "fixed_job.run_until_idle(progress=False)"),
            ("one cause fixed (the order's time), the other left (a key with a space)",
             'b = StreamBuilder("order-windows-space", shuffle_queues=2)\n'
             '(b.source("order-events", JsonDeserializer()).select_timestamp(lambda o: o["ts"])\n'
             ' .key_by(lambda o: f"{o[\'user\']} {o[\'product\']}")\n'
             ' .window(TumblingWindow(Time.seconds(30))).count().to_rstream()\n'
             ' .sink("order-windows-space-out", JsonSerializer(with_key=True)))\n'
             'fixed_job = RocketMQStream(b.build(), broker=broker, spark=spark, properties={"data_dir": str(DATA / "job")})\n'
             "fixed_job.run_until_idle(progress=False)"),
        ],
        "Exercise 3": [
            ("the counts typed in", 'feed_job = {"ann": 5, "fay": 2, "bob": 1, "hal": 1, "cid": 1}'),
            ("a Counter of the customers, no job",
             "feed_job = dict(Counter(line.split()[0] for line in ORDER_LOG))"),
            ("the notebook's word count (every word, a text sink)", "feed_job = job"),
            ("the broken job of Exercise 2 (the order events)", "feed_job = broken_job"),
            ("the feed, never run (a new id)",
             'b = StreamBuilder("loyalty-unrun", shuffle_queues=2)\n'
             '(b.source("order-log", TextDeserializer()).map(lambda line: line.split()[0]).key_by(lambda c: c)\n'
             ' .count().to_rstream().sink("loyalty-unrun", JsonSerializer(with_key=True), visible="on_commit"))\n'
             'feed_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                          properties={"data_dir": str(DATA / "job")})'),
            ("the feed with records visible at once (no on-commit sink)",
             'b = StreamBuilder("loyalty-always", shuffle_queues=2)\n'
             '(b.source("order-log", TextDeserializer()).map(lambda line: line.split()[0]).key_by(lambda c: c)\n'
             ' .count().to_rstream().sink("loyalty-always", JsonSerializer(with_key=True)))\n'
             'feed_job = RocketMQStream(b.build(), broker=broker, spark=spark,\n'
             '                          properties={"data_dir": str(DATA / "job")})\n'
             "feed_job.run_until_idle(progress=False)"),
        ],
    },
}

_CHECK_CALL = re.compile(r'^exercises\.check\("(Exercise \d+)"')


def check_cells(notebook: Any) -> dict[str, int]:
    """Per exercise, the index of its check cell (``exercises.check("Exercise N", ...)``)."""
    return {m.group(1): i for i, c in enumerate(notebook.cells)
            if c.cell_type == "code" and (m := _CHECK_CALL.match(c.source))}


def with_shortcuts(notebook: Any, name: str) -> Any:
    """``notebook`` with every shortcut of ``SHORTCUTS[name]`` spliced in after its check cell, each
    followed by that check again (tagged ``shortcut`` with ``metadata.rstream.shortcut``: what it is)."""
    import nbformat

    cells = check_cells(notebook)
    for exercise in sorted(SHORTCUTS[name], key=lambda e: -cells[e]):
        at = cells[exercise]
        again = notebook.cells[at].source
        added = []
        for what, source in SHORTCUTS[name][exercise]:
            meta = {"tags": ["shortcut"], "rstream": {"shortcut": f"{exercise}: {what}"}}
            added += [nbformat.v4.new_code_cell(source, metadata={"tags": ["shortcut-try"]}),
                      nbformat.v4.new_code_cell(again, metadata=meta)]
        notebook.cells[at + 1:at + 1] = added
    return notebook


def shortcut_verdicts(notebook: Any) -> dict[str, str]:
    """Per shortcut tried (``with_shortcuts``), the verdict its check showed."""
    from tests.support.notebooks import outputs_text

    found = {}
    for cell in notebook.cells:
        if "shortcut" in cell.get("metadata", {}).get("tags", []):
            verdict = re.search(r"Exercise [^:]+: (right|not yet|not quite)\b", outputs_text(cell))
            found[cell.metadata["rstream"]["shortcut"]] = verdict.group(1) if verdict else "(no verdict)"
    return found


#: How a "predict, then run" exercise's run cell ends (its run shows only once a prediction is recorded).
REVEAL_MARK = "# runs only once you have predicted"


def runs_shown_before_a_prediction(notebook: Any) -> list[str]:
    """In a learner's notebook run untouched (no prediction made): the outputs of the run cells that
    showed their run anyway (none may)."""
    from tests.support.notebooks import outputs_text

    cells = [c for c in notebook["cells"]
             if c["cell_type"] == "code" and "".join(c["source"]).rstrip().endswith(REVEAL_MARK)]
    return [outputs_text(c) for c in cells if "the run shows" in outputs_text(c)]


def hints_shown(notebook: Any, name: str) -> list[str]:
    """In a learner's notebook run untouched (no answer given): the outputs that show any hint of its graded
    exercises, as ``cell N: <output>`` (none may: a hint opens only once a prediction is recorded or an
    answer judged). A hint shows either as a level's element (``data-rstream-hint``) or as a level's text,
    in the text or the HTML of an output."""
    from html import escape

    from rstream.widgets.graded import exercises_of
    from tests.support.notebooks import outputs_text

    hints = [spec.hints for spec in exercises_of(name[:2]).items.values()]
    texts = [t for h in hints for level in (h.nudge, h.concept, h.call) for t in (level, escape(level))]
    found = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        output = outputs_text(cell)
        if "data-rstream-hint=" in output or any(text in output for text in texts):
            found.append(f"cell {index}: {output[:300]}")
    return found
