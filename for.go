package cpuwork

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Chunk sizing targets for For: a chunk should take 100 µs - 1 ms, long
// enough that claiming it (one atomic add) is noise, short enough that the
// range balances across slots and a cancellation or a more urgent class is
// noticed quickly.
const (
	forProbe    = 50 * time.Microsecond  // the probe doubles chunks until one takes this long
	forTarget   = 250 * time.Microsecond // preferred chunk duration
	forMinChunk = 100 * time.Microsecond // chunks are not cut below this to make more of them
)

// For runs fn over the index range [0, n) in chunks [lo, hi), in parallel,
// under class c, and returns the first error.
//
// The caller always works: it first takes a slot for class c (as Do does,
// queueing if needed) or, inside a task of e, uses that task's slot. It
// runs chunks of 1, 2, 4, ... indexes until one takes at least 50 µs, sizes
// the remaining chunks from the measured time per index (about 250 µs each,
// at least 100 µs, and smaller only to give every slot several chunks), and
// then recruits helper goroutines on slots that are free now and that
// nobody waits for. It never waits for a second slot, so a For nested in a
// Do (or in another For) cannot deadlock. Helpers give their slot back at a
// chunk boundary as soon as a task is queued; the caller calls Checkpoint
// between chunks.
//
// The first error (fn's, a *PanicError, or ctx's) stops further chunks from
// starting and is returned after running chunks finish. Chunks may run in
// any order and concurrently: fn must be safe for that. fn has no task
// context, so it must not submit to e and wait (Do, Call, Task.Wait with
// ctx): that waits for a second slot while this loop holds slots, the
// nested-acquisition deadlock; run such work before or after the loop, or
// use a Do whose fn calls For. n < 0 is an error;
// n == 0 returns nil without running fn. A ctx that is done before the
// loop starts returns ctx's error without running fn.
//
// fn may call Checkpoint with the enclosing task's ctx (or a nested Do
// with it): while the loop runs, that ctx is shared by several goroutines,
// so such a Checkpoint only yields the P (steps 2 and 3 of Checkpoint);
// the loop itself hands the slot over between the caller's chunks. A For
// nested in a chunk of another For on the same task runs its chunks one
// after another on the chunk's goroutine.
func (e *Executor) For(ctx context.Context, c Class, n int, fn func(lo, hi int) error) error {
	mustCtx(ctx)
	mustExec(e)
	switch {
	case fn == nil:
		return errNilFunc
	case n < 0:
		return fmt.Errorf("cpuwork: For over %d indexes: n must be >= 0", n)
	case n == 0:
		return nil
	case !c.valid():
		return invalidClass(c)
	}
	if tc := taskOf(ctx); tc != nil && tc.e == e && tc.noSlot == holdsSlot {
		e.stats[tc.class].nested.Add(1) // as a nested Do: in Nested only
		if err := ctx.Err(); err != nil {
			return err
		}
		if tc.shared.Load() != 0 {
			return forSequential(ctx, tc.class, n, fn)
		}
		return e.forBody(ctx, tc, n, fn)
	}
	return e.Do(ctx, c, func(ctx context.Context) error {
		return e.forBody(ctx, taskOf(ctx), n, fn)
	})
}

// For is e.For.
//
// Deprecated: use the method [Executor.For].
func For(ctx context.Context, e *Executor, c Class, n int, fn func(lo, hi int) error) error {
	return e.For(ctx, c, n, fn)
}

// forSequential runs fn's chunks one after another on the calling
// goroutine (a For nested in a chunk of a For on the same task).
func forSequential(ctx context.Context, c Class, n int, fn func(lo, hi int) error) error {
	st := &forState{fn: fn, class: c}
	const chunk = 256
	for lo := 0; lo < n; lo += chunk {
		if err := st.call(int64(lo), int64(min(lo+chunk, n))); err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

type forState struct {
	fn    func(lo, hi int) error
	n     int64
	chunk atomic.Int64 // indexes per claim: 1 while the caller probes
	next  atomic.Int64
	class Class
	stop  atomic.Bool
	once  sync.Once
	err   error
	done  <-chan struct{}
	ctx   context.Context
}

func (st *forState) fail(err error) {
	st.once.Do(func() { st.err = err })
	st.stop.Store(true)
}

// call runs one chunk, turning a panic into a *PanicError.
func (st *forState) call(lo, hi int64) (err error) {
	defer recoverTask(st.class, &err, nil)
	return st.fn(int(lo), int(hi))
}

// claim returns the next chunk, or ok false when the range is done or the
// loop stopped.
func (st *forState) claim() (lo, hi int64, ok bool) {
	if st.stop.Load() {
		return 0, 0, false
	}
	select {
	case <-st.done:
		st.fail(st.ctx.Err())
		return 0, 0, false
	default:
	}
	return st.claimN(st.chunk.Load())
}

// claimN claims the next size indexes.
func (st *forState) claimN(size int64) (lo, hi int64, ok bool) {
	lo = st.next.Add(size) - size
	if lo >= st.n {
		return 0, 0, false
	}
	return lo, min(lo+size, st.n), true
}

func (st *forState) run(lo, hi int64) bool {
	if err := st.call(lo, hi); err != nil {
		st.fail(err)
		return false
	}
	return true
}

func (e *Executor) forBody(ctx context.Context, tc *taskCtx, n int, fn func(lo, hi int) error) error {
	st := &forState{fn: fn, n: int64(n), class: tc.class, done: ctx.Done(), ctx: ctx}
	st.chunk.Store(1)

	// From here on, fn may run on helpers while the caller's task context
	// is captured in fn: Checkpoint with that context stays on the safe
	// path (it only yields the P) until the loop ends.
	tc.shared.Add(1)
	var wg sync.WaitGroup
	returned := false
	defer func() {
		// The caller's fn may end the goroutine (runtime.Goexit) while
		// helpers run: stop them and wait before the task context is the
		// caller's alone again (else their Checkpoints race on it).
		if !returned {
			st.fail(ErrGoexit)
		}
		wg.Wait()
		tc.shared.Add(-1)
	}()
	var active atomic.Int64      // helpers running
	capped := e.capped(tc.class) // under SpareP, batch slots are counted under the lock: the caller works alone
	// recruit adds helpers on slots that are free now and that nobody
	// waits for, up to one per slot and one per chunk left besides the
	// caller's. It runs before the probe (helpers take one index at a
	// time while the caller measures: a loop of a few long indexes would
	// otherwise leave every other slot idle for the first one) and again
	// at each of the caller's chunk boundaries, so a slot freed while the
	// loop runs is used.
	recruit := func() {
		if capped {
			return
		}
		for e.waiting.Load() == 0 {
			c := st.chunk.Load()
			left := (st.n - st.next.Load() + c - 1) / c
			n := active.Load()
			if n >= min(left-1, int64(e.Slots())-1) || !e.tryAcquire() {
				return
			}
			active.Add(1)
			wg.Add(1)
			go func() {
				defer active.Add(-1)
				e.forHelper(st, &wg)
			}()
		}
	}
	if st.n > 1 {
		recruit()
	}
	// Probe on the caller with doubling claims until one takes forProbe;
	// its time per index sizes the chunks of the rest.
	size := int64(1)
	for {
		lo, hi, ok := st.claimN(size)
		if !ok || st.stop.Load() {
			break
		}
		t0 := now()
		if !st.run(lo, hi) {
			break
		}
		if d := now() - t0; d >= int64(forProbe) {
			perIndex := max(d/(hi-lo), 1)
			slots := int64(e.Slots())
			remaining := st.n - st.next.Load()
			chunk := max(int64(forTarget)/perIndex, 1)
			if remaining > 0 && remaining/chunk < 4*slots {
				chunk = max(remaining/(4*slots), int64(forMinChunk)/perIndex, 1)
			}
			st.chunk.Store(chunk)
			break
		}
		size *= 2
		if err := ctx.Err(); err != nil {
			st.fail(err)
			break
		}
	}
	for {
		lo, hi, ok := st.claim()
		if !ok || !st.run(lo, hi) {
			break
		}
		if err := tc.checkpoint(tc); err != nil {
			st.fail(err)
			break
		}
		recruit()
	}
	wg.Wait()
	returned = true
	return st.err
}

// forHelper runs chunks on a slot taken with tryAcquire until the range is
// done, the loop stops, or a task is queued (then it gives the slot back).
// Its slot is given back on every path, runtime.Goexit in fn included
// (the loop then fails with ErrGoexit).
func (e *Executor) forHelper(st *forState, wg *sync.WaitGroup) {
	t0 := now()
	returned := false
	defer func() {
		if !returned {
			st.fail(ErrGoexit)
		}
		e.stats[st.class].used.Add(now() - t0)
		e.release()
		wg.Done()
	}()
	for e.waiting.Load() == 0 {
		lo, hi, ok := st.claim()
		if !ok || !st.run(lo, hi) {
			break
		}
	}
	returned = true
}
