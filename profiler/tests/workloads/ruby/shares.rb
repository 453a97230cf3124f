# Outer::Worker#alpha, #beta and #gamma burn 60%, 30% and 10% of the script's CPU time: each round
# of Outer::Worker#run calls them with 6, 3 and 1 times the same loop, until SECONDS (the first
# argument) have passed. #beta is called from a block that Array#each, a C method, calls; the
# rounds run under a singleton method, Outer::Worker.start. How much work varies from round to
# round (about 2.5 ms), so that no sampling period can fall in step with the rounds. Prints
# `main TID` first.
UNIT = 10_000

module Outer
  class Worker
    def self.start(seconds)
      new.run(Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds)
    end

    def run(finish)
      while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
        unit = rand(UNIT / 2..UNIT * 3 / 2)
        alpha(6 * unit)
        [1].each { beta(3 * unit) }
        gamma(unit)
      end
    end

    def alpha(n)
      total = 0
      i = 0
      while i < n
        total += i * i % 7
        i += 1
      end
      total
    end

    def beta(n)
      total = 0
      i = 0
      while i < n
        total += i * i % 7
        i += 1
      end
      total
    end

    def gamma(n)
      total = 0
      i = 0
      while i < n
        total += i * i % 7
        i += 1
      end
      total
    end
  end
end

$stdout.write("main #{Thread.current.native_thread_id}\n")
$stdout.flush
Outer::Worker.start(Float(ARGV[0]))
