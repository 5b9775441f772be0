"""How a Ray job's log stream becomes whole lines (harness.launch.ray_job.RayJob): chunks cut
mid-line, a stream that breaks and is reopened from the top, lines the stream had not sent when the
job ended. The log source here is a recorded stream, not Ray (test_ray_cluster.py runs the real one):
what is under test is the reassembly, which no real cluster breaks on demand."""

from __future__ import annotations

import time

from harness.launch.ray_job import RayJob

LOG = "line 0\nline 1\nline 2 is long\nline 3\nline 4 has no newline"


class RecordedStream:
    """Serves LOG as Ray does: each stream starts from the top; the first breaks after two chunks;
    the stored log (get_job_logs) is all of it once the job has ended."""

    def __init__(self, cuts: list[int]):
        self.cuts, self.opened, self.status = cuts, 0, "RUNNING"

    async def tail_job_logs(self, job_id):
        self.opened += 1
        start = 0
        for n, cut in enumerate(self.cuts):
            if self.opened == 1 and n == 2:
                raise RuntimeError("WebSocket connection closed unexpectedly")
            yield LOG[start:cut]
            start = cut
        self.status = "SUCCEEDED"  # the second stream runs to the job's end, without the last chunk

    def get_job_status(self, job_id):
        return self.status

    def get_job_logs(self, job_id):
        return LOG

    def get_job_info(self, job_id):
        raise RuntimeError("not asked")


def test_chunks_become_whole_lines_once_each_across_a_reopened_stream():
    client = RecordedStream(cuts=[4, 16, 30, 37])  # cuts inside "line 0", "line 2 ...", "line 3"
    job = RayJob(client, "http://127.0.0.1:8265", "run-x", attached=False)
    lines: list[str] = []
    deadline = time.time() + 10
    while job.exit_code() is None and time.time() < deadline:
        lines += job.poll(0.2)
    assert job.exit_code() == 0 and client.opened == 2
    assert "".join(lines) == LOG  # nothing repeated after the reopen, nothing lost at the end
    assert lines[:4] == ["line 0\n", "line 1\n", "line 2 is long\n", "line 3\n"]  # whole lines only
