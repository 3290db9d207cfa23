// Package peers compares cpuwork's executor with what Go services use today
// to bound CPU-bound work: a goroutine per task, a channel semaphore,
// errgroup.SetLimit, semaphore.Weighted, ants v2, pond v2 and conc's pool.
//
// It lives in the CLI's module (cmd/cpuwork) so that the library module
// never depends on the peers. Run from this directory:
//
//	go test -run '^$' -bench . -count 10 | tee new.txt
//	go run golang.org/x/perf/cmd/benchstat@latest new.txt
//
// Every variant runs at the same concurrency (the CPU budget's slot count)
// on tasks of calibrated CPU work (a multiply-add loop, never a sleep) of
// 0, 1, 10 and 100 µs, submitted by 1 or 4×GOMAXPROCS producer goroutines.
// One op is one task, from submission to completion of all b.N tasks.
package peers
