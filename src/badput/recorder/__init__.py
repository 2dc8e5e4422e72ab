"""The :class:`Recorder`: what training code calls to record its moments.

Recording is nearly free, never hurts training, and loses nothing it acknowledged:

- **Durable when the call returns.** On a directory store (the default) each
  process copies its lines into a pre-allocated, memory-mapped spool segment
  (:class:`~badput.store.SpooledWriter`). A ``record_*`` call reads the clock,
  formats one JSON line and copies it into the mapping: no lock, no syscall, no
  I/O wait. Once the call has returned, the line is in the kernel's page cache,
  so it survives ``SIGKILL``, ``SIGTERM`` or a crash of the process (not a crash
  of the machine). Measured cost: ``bench/bench_record.py``.
- **Background thread.** Started on the first record: every 50 ms (at once after
  lifecycle and checkpoint events) it ships the spool to the process's event file
  with ``write()`` and deletes the segments shipped (the mapped, resident part
  stays a few MiB however long the job); it writes heartbeats every
  ``heartbeat_interval`` seconds and makes the next pages and segment ready ahead
  of the writer. If the event file was deleted or replaced, it warns once and
  writes every event of this process to a new file; if it was cut short from
  outside (``> file``, logrotate's ``copytruncate``), it counts the events cut
  away (:attr:`Recorder.lost_events`), warns once and goes on: the training
  process never maps the file others can touch, so no ``SIGBUS``. What a killed
  process left in its spool is shipped by the next recorder of the job,
  ``badput run`` and readers of the job.
- **Other stores** (``memory://``, ``gcl://``, custom ones), and a directory store
  that cannot be written (read-only, full, missing): lines wait in a bounded
  buffer (:data:`MAX_BUFFERED_BYTES`) that the thread writes every
  ``flush_interval`` (at once after lifecycle and checkpoint events). A store
  that hangs cannot block the training thread: the buffer fills, and what does
  not fit is dropped and counted.
- **Never raises after construction.** Every event ends up written, or counted
  in :attr:`Recorder.dropped_events` with ONE warning per kind of problem on the
  ``badput`` logger (invalid values, unwritable store, overflow, hung store,
  closed recorder).
- **Exit and fork.** Recorders are closed at interpreter exit (bounded by
  ``CLOSE_TIMEOUT``: a hung store never keeps the process alive); a clean close
  truncates the file to what was written. In a forked child, a recorder forgets
  its parent's file, buffer and thread and records to its own stream.

Identity of every event, detected without configuration (``badput.runtime.env``):
rank from ``RANK`` (torchrun), ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``,
``SLURM_PROCID`` or an initialised ``torch.distributed``; attempt from the
``attempt`` argument, else the launchers' restart counters composed
(``BADPUT_ATTEMPT`` or ``SLURM_RESTART_COUNT`` outside, torchrun's
``TORCHELASTIC_RESTART_COUNT`` inside: worker-group restart 2 of launcher attempt 1
is attempt ``"1.2"``), else a fresh id per process start,
``<UTC start time YYYYmmddTHHMMSS>-<pid>`` (sorts by start time). Numeric ids
are written as JSON integers.

Process start: in a process started by a launcher (``badput run``, torchrun,
Slurm, MPI), the first record also records ``process_init`` from the OS's start
time of the process to the recorder's construction (interpreter start, imports),
and the process's first ``record_job_start()`` is dated at the process start.
Under ``badput run`` the launcher owns the job's end: ``record_job_end()`` only
flushes (the launcher records ``job_end`` with the exit status).

Disabled recording: ``enabled=False``, ``BADPUT_DISABLE=1`` (wins over
everything), or ``leader_only=True`` on a rank other than 0 make
``Recorder(...)`` return a :class:`NullRecorder`: same interface, every method a
no-op, no thread, no file.

The room: :class:`Recorder` (``_recorder``) on its base classes: properties, flush and
close (``_lifetime``), the lines and the record calls' helpers (``_lines``), the background
thread (``_writer_thread``), what happens to a line the hot path did not copy (``_stream``)
and the phases of a distributed job (``_phases``); who records (``_identity``), the context
managers (``_spans``), timed sections (``_sections``), the no-op recorder written out behind
the same interface (``_null``), the teardown a crash begins (``_teardown``) and the intervals
timed before the process has a recorder (``_early``: integrations' hooks, torchrun's own
start).
"""

from badput.recorder._early import record_end, record_interval, record_start
from badput.recorder._identity import DEFAULT_HEARTBEAT_INTERVAL, resolve_attempt
from badput.recorder._lifetime import LIVE_GROUP as LIVE_RECORDERS
from badput.recorder._null import NullRecorder
from badput.recorder._recorder import Recorder
from badput.recorder._spans import SPANS
from badput.recorder._teardown import begin_teardown

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "LIVE_RECORDERS",
    "SPANS",
    "NullRecorder",
    "Recorder",
    "begin_teardown",
    "record_end",
    "record_interval",
    "record_start",
    "resolve_attempt",
]
