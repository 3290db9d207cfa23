package cpuwork

import (
	"context"
	"time"

	"github.com/cpuwork/cpuwork/internal/admission"
)

// Target is a request's latency target, for WithTarget.
type Target struct {
	// Latency is how long after the WithTarget call the request should
	// be done. 0 or negative: no latency target (Service is still used).
	Latency time.Duration
	// Service is the request's expected run time once it holds a slot
	// (for a For loop: from its first slot to its end, on the slots it
	// gets; while it waits, the queue counts it as that time on each of
	// min(n, the loop's slot bound) slots). 0 means unknown:
	// the class's recent average slot time stands in. Only its size
	// relative to other requests' needs to be right: the executor scales
	// it by the ratio of the slot times recent tasks of the class took to
	// the Service they gave (within 0.25-8x), so a run time measured on
	// one idle core is corrected for what the slots see under load.
	Service time.Duration
}

// WithTarget returns a context that carries t for the tasks submitted with
// it (Do, Go, TryGo, For): they are ordered in their class by the due
// time now + t.Latency, and refused with an error wrapping ErrSaturated
// and ErrDeadline once they can no longer meet it, beyond the class's
// late budget (t is an objective such as a p99 target: about 1 % of the
// class's queued objective tasks are let through late instead; see the
// package documentation's "Latency targets"). Call it when the request
// arrives, so that its target counts from there. The ctx deadline, if
// earlier, still wins, and is binding: no task is let through expected
// past it. It reads the clock once and allocates once.
func WithTarget(ctx context.Context, t Target) context.Context {
	mustCtx(ctx)
	return admission.TargetContext(ctx, t.Latency, t.Service)
}

// ErrDeadline is wrapped, beside ErrSaturated, by the error of a task
// refused because it could no longer meet its latency target (WithTarget,
// its ctx deadline, ClassOptions.LatencyTarget): at the door, when the work
// queued ahead of it and its own expected run time end past its due (judged
// there while its class sheds or its recent arrivals outrun the slots;
// otherwise the task queues); or at the head of the queue, when less time
// is left than its expected run time (for an objective, once its class's
// late budget is spent).
// errors.Is(err, ErrDeadline) tells it apart from a full queue.
var ErrDeadline = admission.ErrDeadline

// Allow is the door's verdict on a task of class c submitted now with ctx,
// without submitting one: nil when Do, Go or For would run or queue it,
// else the error they would return (ErrClosed, ctx's error, an error
// matching ErrSaturated, possibly wrapping ErrDeadline). It reserves
// nothing: call it before work a refused request should not cost (reading
// a large body), with the ctx that carries the request's target, then
// submit as usual; the submission decides again. A refusal counts as a
// submission's would (Rejected, Shed); an allowed call counts nothing. It
// allocates nothing; a nil ctx or executor panics.
func (e *Executor) Allow(ctx context.Context, c Class) error {
	mustCtx(ctx)
	mustExec(e)
	if !c.valid() {
		return invalidClass(c)
	}
	if e.g.Closed() {
		e.stats[c].Rejected.Add(1)
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if e.rec == nil {
		return e.g.Allow(ctx, admission.Class(c))
	}
	if e.rec.observe {
		return nil
	}
	err := e.g.Allow(ctx, admission.Class(c))
	if err != nil {
		e.recordRefusal(ctx, c, err)
	}
	return err
}

// WithKey returns a context whose tasks are charged to key (a tenant, an
// API key, a client): inside each class the slots are shared fairly
// across the keys that have tasks queued or running, by measured slot
// time. A key past its share queues behind the other keys' tasks, by up
// to ten seconds, and is the first refused when its class sheds. Keys
// cost nothing until tasks queue (a task that finds a free slot is not
// charged).
//
// Keys must be authenticated identities of bounded cardinality: the
// executor cannot tell one client sending under many keys from many
// clients. A key earns a share of its own once one of its tasks has been
// served from the queue; until then its tasks share one pool with every
// other such key and with the class's tasks that carry no key. So a
// client that makes up a key per request is one sharer, not many; but a
// client holding many keys that have each been served gets a share for
// each, at the others' expense.
//
// Memory is bounded in bytes: up to 4096 keys a class are tracked, each
// as a 64-bit digest and at most 64 bytes of its string (under 1 MiB a
// class); nothing else of key is kept once its task ends. Keys with work
// in flight are kept; a full table drops the others, and while it
// cannot, new keys' tasks share the pool untracked. Stats.Keys reports
// the keys with the most slot time, a key longer than 64 bytes as its
// first bytes and its digest.
func WithKey(ctx context.Context, key string) context.Context {
	mustCtx(ctx)
	return admission.WithKey(ctx, key)
}
