# Off the CPU for SECONDS (the first argument): the main thread sleeps in Napper#nap, 10 ms at a
# time, and a second thread waits in Waiter#wait on a queue the main thread feeds every tenth
# nap. Prints `main TID` first, then `waiter TID`.
$stdout.sync = true

class Napper
  def nap
    sleep 0.01
  end
end

class Waiter
  def initialize(queue)
    @queue = queue
  end

  def wait
    $stdout.write("waiter #{Thread.current.native_thread_id}\n")
    loop { @queue.pop }
  end
end

$stdout.write("main #{Thread.current.native_thread_id}\n")
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0])
queue = Queue.new
Thread.new { Waiter.new(queue).wait }
napper = Napper.new
naps = 0
while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
  napper.nap
  naps += 1
  queue << naps if naps % 10 == 0
end
