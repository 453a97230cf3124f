# Allocates strings for SECONDS (the first argument) in Churn#allocate, so that a good share of its
# time is the garbage collector's, while a second thread runs Sum#spin, which allocates nothing:
# its samples are never the collector's. Prints `main TID` first, then `spinner TID`.
$stdout.sync = true

class Churn
  def allocate(finish)
    kept = nil
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
      kept = Array.new(2000) { |i| "x" * (i % 50) }
    end
    kept
  end
end

class Sum
  def spin(finish)
    $stdout.write("spinner #{Thread.current.native_thread_id}\n")
    total = 0
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
      total += 1
    end
    total
  end
end

$stdout.write("main #{Thread.current.native_thread_id}\n")
finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Float(ARGV[0])
spinner = Thread.new { Sum.new.spin(finish) }
Churn.new.allocate(finish)
spinner.join
