# Two threads spin for SECONDS (the first argument), each in a method of its own, Spinner#left and
# Spinner#right, while the main thread joins them. The main thread prints `main TID` first; each
# spinner prints `left TID` or `right TID` as it starts, in one write (they print at the same
# time).
$stdout.sync = true

class Spinner
  def initialize(finish)
    @finish = finish
  end

  def left
    $stdout.write("left #{Thread.current.native_thread_id}\n")
    total = 0
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < @finish
      i = 0
      while i < 10_000
        total += i * i % 7
        i += 1
      end
    end
    total
  end

  def right
    $stdout.write("right #{Thread.current.native_thread_id}\n")
    total = 0
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < @finish
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
spinner = Spinner.new(Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0]))
[Thread.new { spinner.left }, Thread.new { spinner.right }].each(&:join)
