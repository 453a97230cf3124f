<?php
// Outer\Worker::alpha, ::beta and ::gamma burn 60%, 30% and 10% of the script's CPU time: each
// round of Outer\Worker::run calls them with 6, 3 and 1 times the same loop, until SECONDS (the
// first argument) have passed. beta is called from a closure that array_map, a C function, calls
// back; the rounds run under a static method, Outer\Worker::start. How much work varies from
// round to round (about 2.5 ms), so that no sampling period can fall in step with the rounds.
// Prints `main PID` first.
namespace Outer;

const UNIT = 30000;

class Worker
{
    public static function start(float $seconds): void
    {
        (new Worker())->run(\hrtime(true) + (int) ($seconds * 1e9));
    }

    public function run(int $finish): void
    {
        while (\hrtime(true) < $finish) {
            $unit = \mt_rand(\intdiv(UNIT, 2), \intdiv(UNIT * 3, 2));
            $this->alpha(6 * $unit);
            \array_map(function ($one) use ($unit) { return $this->beta(3 * $unit * $one); }, [1]);
            $this->gamma($unit);
        }
    }

    public function alpha(int $n): int
    {
        $total = 0;
        for ($i = 0; $i < $n; $i++) {
            $total += $i * $i % 7;
        }
        return $total;
    }

    public function beta(int $n): int
    {
        $total = 0;
        for ($i = 0; $i < $n; $i++) {
            $total += $i * $i % 7;
        }
        return $total;
    }

    public function gamma(int $n): int
    {
        $total = 0;
        for ($i = 0; $i < $n; $i++) {
            $total += $i * $i % 7;
        }
        return $total;
    }
}

echo 'main ', \getmypid(), "\n";
\flush();
Worker::start((float) $argv[1]);
