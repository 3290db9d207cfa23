package cpuwork

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
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

// For runs fn over [0, n) in chunks [lo, hi), in parallel under class c,
// and returns the first error (fn's, a *PanicError, or ctx's), after the
// chunks already running finish. The caller takes one slot (as Do) and
// always works; helpers run chunks on slots that are free or that free up
// in the loop's turn, and give them back at chunk boundaries to more
// urgent work. Chunks are sized to about 250 µs from measured time per
// index. fn must be safe to call concurrently, in any order. n < 0 is an
// error; n == 0 returns nil. Nested Do or For inside fn runs on the slot
// its chunk holds, so nesting cannot deadlock; Stats counts the loop once.
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
	if t := runningTask().of(e); t != nil && t.noSlot == holdsSlot {
		e.stats[t.class].nested.Add(1) // as a nested Do: in Nested only
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.shared != 0 {
			return forSequential(ctx, t.class, n, fn)
		}
		return e.forBody(ctx, t, n, fn, false)
	}
	return e.do(ctx, c, min(n, e.forBound()), func(ctx context.Context) error {
		return e.forBody(ctx, runningTask().of(e), n, fn, true)
	})
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
	due   int64 // the loop's task's due: its helpers wait in line there
	stop  atomic.Bool
	once  sync.Once
	err   error
	done  <-chan struct{}
	ctx   context.Context
	// finished is closed when the caller's part of the loop is over:
	// helpers still queued for a slot leave the queue.
	finished chan struct{}
	// helpers counts helper goroutines alive, queued or running; inLine
	// those of them that wait in line (within the loop's slot bound, forMaxSlots).
	helpers, inLine atomic.Int64
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

// forBody runs the loop on tc's slot with helpers. whole says the loop is
// tc's whole task (a For called outside a task): once every chunk is
// claimed, the caller gives its slot back instead of holding it idle
// while helpers finish their last chunks.
func (e *Executor) forBody(ctx context.Context, tc *task, n int, fn func(lo, hi int) error, whole bool) error {
	st := &forState{fn: fn, n: int64(n), class: tc.class, due: tc.due(), done: ctx.Done(), ctx: ctx,
		finished: make(chan struct{})}
	st.chunk.Store(1)
	// Its helpers queue for slots of their own from here: if the caller
	// queues again (a hand-over), it counts for its one slot.
	tc.w.SetSpan(1)

	// From here on, fn may run on helpers beside the caller: a
	// Checkpoint in a chunk on the caller only yields the P until the
	// loop ends (the loop hands the slot over between chunks).
	tc.shared++
	var wg sync.WaitGroup
	returned := false
	defer func() {
		// The caller's fn may end the goroutine (runtime.Goexit) while
		// helpers run: stop them and wait for them before the task ends
		// (they refer to its forState and its due).
		if !returned {
			st.fail(ErrGoexit)
			close(st.finished)
		}
		wg.Wait()
		tc.shared--
	}()
	// recruit adds helpers, up to one per slot and one per chunk left
	// besides the caller's: on slots free now that nobody waits for, and,
	// up to the loop's slot bound with the caller, queued in line at the loop's due
	// like any task of its class. It runs before the probe (helpers take
	// one index at a time while the caller measures: a loop of a few long
	// indexes would otherwise leave every other slot idle for the first
	// one) and again at each of the caller's chunk boundaries.
	bound := int64(e.forBound())
	recruit := func() {
		for {
			c := st.chunk.Load()
			left := (st.n - st.next.Load() + c - 1) / c
			if st.helpers.Load() >= min(left-1, e.slotCount()-1) || st.stop.Load() {
				return
			}
			inLine := st.inLine.Load() < bound-1
			running := e.g.TryAcquire(admission.Class(st.class))
			if !running && !inLine {
				return
			}
			st.helpers.Add(1)
			if inLine {
				st.inLine.Add(1)
			}
			wg.Add(1)
			go e.forHelper(st, &wg, running, inLine)
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
			slots := e.slotCount()
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
		if err := tc.checkpoint(ctx); err != nil {
			st.fail(err)
			break
		}
		recruit()
	}
	close(st.finished)
	if whole && st.helpers.Load() > 0 && tc.noSlot == holdsSlot {
		if tc.weight != 0 {
			e.charge(tc, now())
			tc.weight = 0
		}
		tc.noSlot = handedBack
		e.releaseSlot(&tc.w)
	}
	wg.Wait()
	returned = true
	return st.err
}

// forBound is the most slots one For loop holds while others wait
// (default max(2, ceil(slots/2)), at most the slots).
func (e *Executor) forBound() int {
	n := int(e.slotCount())
	if e.forMaxSlots > 0 {
		return min(e.forMaxSlots, n)
	}
	return min(max(2, (n+1)/2), n)
}

// forHelper runs chunks of st on a slot of st.class: the one it already
// holds (running), else one it waits for in line at the loop's due. It
// hands its slot back at a chunk boundary when it must (inLine: to more
// urgent work or work due earlier; beyond the bound: to anyone waiting),
// and an inLine helper then queues again at its place, until the range is
// done or the loop stopped. Its slot goes back through releaseSlot on
// every path, runtime.Goexit in fn included (the loop then fails with
// ErrGoexit).
func (e *Executor) forHelper(st *forState, wg *sync.WaitGroup, running, inLine bool) {
	// The helper's goroutine runs on a slot of e while it runs chunks: a
	// Do or For of e in a chunk runs on it (no nested deadlock), and a
	// Checkpoint there only yields the P (the helper hands its slot over
	// between chunks itself).
	h := &task{ctx: st.ctx, e: e, class: st.class}
	h.shared = 1
	h.w = admission.MakeHelper(admission.Class(st.class), st.due)
	w := &h.w
	h.enter()
	held, returned := running, false
	var t0 int64
	defer func() {
		h.leave()
		if !returned {
			st.fail(ErrGoexit)
		}
		if held {
			e.g.Record(admission.SlotPeriod{W: w, Slot: now() - t0, ChargeOnly: true})
			e.releaseSlot(w)
		}
		st.helpers.Add(-1)
		if inLine {
			st.inLine.Add(-1)
		}
		wg.Done()
	}()
	for {
		if !held {
			if held = e.awaitHelper(st, w); !held {
				break
			}
		}
		t0 = now()
		more := true
		for {
			if e.g.Waiting() && (!inLine || e.g.Behind(admission.Class(st.class), st.due)) {
				break
			}
			lo, hi, ok := st.claim()
			if !ok || !st.run(lo, hi) {
				more = false
				break
			}
		}
		e.g.Record(admission.SlotPeriod{W: w, Slot: now() - t0, ChargeOnly: true})
		held = false
		e.releaseSlot(w)
		if !more || !inLine {
			break
		}
	}
	returned = true
}

// awaitHelper queues helper waiter w at its loop's due and blocks until w
// is granted a slot (true), or the loop's caller finished or the
// executor closed first (false; a slot granted meanwhile is given back).
// Helpers are not submissions: never counted, refused or shed.
func (e *Executor) awaitHelper(st *forState, w *admission.Waiter) bool {
	select {
	case <-st.finished:
		return false
	default:
	}
	if st.stop.Load() || !e.g.Requeue(w, nil, true) {
		return false
	}
	return e.g.Await(st.finished, w) == admission.WaitGranted
}
