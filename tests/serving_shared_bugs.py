"""The bugs of the serving notebook's sections that the reuse notebook includes: the paged store
(`kv-cache-serving/04_paged_store.py`) and the requests (`04_paged_requests.py`). One table, spread into both
notebooks' bug tables, so that a bug in shared code must stop every notebook that runs it (the reuse notebook
leaves out the store bugs in code it never runs: `REUSE_NEVER_RUNS`)."""

from __future__ import annotations

from bug_injection import bug

STORE, REQUESTS = "04_paged_store.py", "04_paged_requests.py"
STORE_BUGS = {
    "paged: block offset off by one": bug(
        STORE,
        ("addresses.append(block * pool.block_size + pool.fill[block])",
         "addresses.append(block * pool.block_size + pool.fill[block] + 1)")),
    "paged: blocks gathered in reverse order": bug(
        STORE,
        ("for b in self.tables[seq] for s in range(self.pool.fill[b])",
         "for b in reversed(self.tables[seq]) for s in range(self.pool.fill[b])")),
    "paged: freed block not returned": bug(
        STORE,
        ("        self.clear(block)\n        self.free.append(block)\n",
         "        self.clear(block)\n")),
    "paged: freed block returned twice": bug(
        STORE,
        ("            self.pool.release(block)\n",
         "            self.pool.release(block)\n            self.pool.free.append(block)\n")),
    "paged: block returned while still held": bug(
        STORE,
        ("        if self.refs[block] == 0:\n            self.reclaim(block)\n",
         "        if self.refs[block] == 0:\n            self.clear(block)\n        self.free.append(block)\n")),
    "paged: release ignores the reference count": bug(
        STORE,
        ("        self.refs[block] -= 1\n",
         "        self.refs[block] = 0\n")),
    "paged: a new holder not counted": bug(
        STORE,
        ("    def hold(self, block):\n        self.refs[block] += 1\n",
         "    def hold(self, block):\n        pass\n")),
    "paged: forked block table reversed": bug(
        STORE,
        ("self.add(child, self.tables[parent])",
         "self.add(child, self.tables[parent][::-1])")),
    "paged: copy-on-write skipped": bug(STORE, ("if pool.refs[table[-1]] > 1:", "if pool.refs[table[-1]] > 2:")),
    "paged: copy-on-write keeps writing the old block": bug(
        STORE,
        ("        pool.release(old)\n        table[-1] = new\n",
         "        pool.release(old)\n")),
    "paged: copy-on-write copies K only": bug(
        STORE,
        ("        for t in pool.k + pool.v:\n            t[new] = t[old]\n",
         "        for t in pool.k:\n            t[new] = t[old]\n")),
    "paged: copy-on-write forgets the fill count": bug(STORE, ("        pool.fill[new] = pool.fill[old]\n", "")),
    "paged: reused block's fill count kept": bug(STORE, ("        self.fill[block] = 0\n", "")),
    "paged: a chunk of several positions written scrambled": bug(
        STORE,
        ("self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.transpose(0, 1)",
         "self.pool.k[layer].view(-1, *k.shape[::2])[addresses] = k.reshape(k.shape[1], k.shape[0], k.shape[2])")),
    "paged: block reclaimed while one holder is left": bug(
        STORE,
        ("        if self.refs[block] == 0:\n",
         "        if self.refs[block] <= 1:\n")),
    "paged: a freed sequence keeps its first block": bug(
        STORE,
        ("for block in reversed(self.tables.pop(seq)):",
         "for block in reversed(self.tables.pop(seq)[1:]):")),
}
REQUEST_BUGS = {
    "scheduler: reservation one position short": bug(
        REQUESTS,
        ("len(request.prompt) + request.max_new - 1) / block_size",
         "len(request.prompt) + request.max_new - 2) / block_size")),
}

# The reuse notebook never forks a sequence, and never writes into a shared block: it shares only full blocks,
# which are never written again, so copy-on-write never runs there. These bugs stop the serving notebook only.
REUSE_NEVER_RUNS = {
    "paged: forked block table reversed",
    "paged: copy-on-write skipped",
    "paged: copy-on-write keeps writing the old block",
    "paged: copy-on-write copies K only",
    "paged: copy-on-write forgets the fill count",
}
