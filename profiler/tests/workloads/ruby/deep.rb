# Deep#recurse calls itself DEPTH times (the second argument, 300 by default: 301 frames of it),
# then Deep#spin burns the CPU at the bottom for SECONDS (the first argument). Prints `main TID`
# first.
DEPTH = ARGV[1] ? Integer(ARGV[1]) : 300

class Deep
  def recurse(n, finish)
    return spin(finish) if n.zero?

    recurse(n - 1, finish)
  end

  def spin(finish)
    total = 0
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
      i = 0
      while i < 10_000
        total += i * i % 7
        i += 1
      end
    end
    total
  end
end

$stdout.write("main #{Thread.current.native_thread_id}\n")
$stdout.flush
Deep.new.recurse(DEPTH, Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0]))
