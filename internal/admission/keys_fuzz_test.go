package admission

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// fuzzOwner records the waiters woken: granted ones start running,
// refused ones are gone (the Granter ended their key's charge).
type fuzzOwner struct{ granted, refused []*Waiter }

func (o *fuzzOwner) Wake(w *Waiter, _ *Keep) {
	if w.Refusal() != nil {
		o.refused = append(o.refused, w)
		return
	}
	w.granted = false
	o.granted = append(o.granted, w)
}
func (o *fuzzOwner) Released() {}

// FuzzKeySequences drives a Granter on a virtual clock with a sequence
// of keyed, unkeyed and made-up-key arrivals, task ends, withdrawals and
// clock steps, and checks the sharing invariants after every step: the
// count of sharers with work in flight is the number of sharers (the
// pool and the table's earned keys) with a task in flight, no count is
// negative, the table stays within keyTableMax keys of at most
// keyNameMax bytes each, no lead passes keyLeadMax, and once every task
// has ended no sharer has work in flight.
func FuzzKeySequences(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 255, 1, 1, 3, 9, 0, 0, 2, 0})
	f.Add([]byte{0, 255, 0, 255, 0, 255, 0, 255, 1, 0, 1, 0, 0, 254, 0, 7})
	f.Add([]byte{0, 3, 0, 3, 0, 3, 0, 3, 0, 128, 3, 200, 1, 0, 2, 1, 0, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 4096 {
			ops = ops[:4096]
		}
		clock := int64(time.Second)
		o := &fuzzOwner{}
		var g Granter
		var cnt [NumClasses]Counters
		cfg := Config{DefaultQueueLimit: 64, Owner: o, Log: slog.New(slog.DiscardHandler), Clock: func() int64 { return clock }}
		for c := range cnt {
			cfg.Counters[c] = &cnt[c]
		}
		if err := g.Init(cfg); err != nil {
			t.Fatal(err)
		}
		g.SetCapacity(2)
		type running struct {
			w     *Waiter
			since int64
		}
		var run []running
		var queued []*Waiter
		made := 0
		start := func(w *Waiter) { run = append(run, running{w, clock}) }
		unqueue := func(w *Waiter) {
			for i, q := range queued {
				if q == w {
					queued = append(queued[:i], queued[i+1:]...)
					return
				}
			}
		}
		drain := func() {
			for _, w := range o.granted {
				start(w)
				unqueue(w)
			}
			for _, w := range o.refused {
				unqueue(w)
			}
			o.granted, o.refused = o.granted[:0], o.refused[:0]
		}
		end := func(i int) {
			r := run[i]
			run = append(run[:i], run[i+1:]...)
			w := r.w
			g.Record(SlotPeriod{W: w, Slot: clock - r.since, Weight: 1, Waited: w.enq != 0})
			g.keyDone(w)
			g.release(w.class, &w.est, nil)
		}
		check := func(step int) {
			t.Helper()
			g.lock()
			defer g.unlock()
			for c := range g.keys {
				kt := &g.keys[c]
				sharing := int32(0)
				if n := kt.pool.active.Load(); n < 0 {
					t.Fatalf("step %d: the pool has %d tasks in flight", step, n)
				} else if n > 0 {
					sharing++
				}
				if len(kt.m) > keyTableMax {
					t.Fatalf("step %d: %d keys tracked, bound %d", step, len(kt.m), keyTableMax)
				}
				for _, ks := range kt.m {
					switch n := ks.active.Load(); {
					case n < 0:
						t.Fatalf("step %d: key %q has %d tasks in flight", step, ks.name, n)
					case n > 0 && !ks.earned.Load():
						t.Fatalf("step %d: key %q has %d tasks in flight charged to it before it earned a share", step, ks.name, n)
					case n > 0:
						sharing++
					}
					if len(ks.name) > keyNameMax {
						t.Fatalf("step %d: a key's name kept at %d bytes, bound %d", step, len(ks.name), keyNameMax)
					}
					if lead := ks.vc.Load() - clock; lead > keyLeadMax {
						t.Fatalf("step %d: key %q leads by %v, cap %v", step, ks.name, time.Duration(lead), time.Duration(keyLeadMax))
					}
				}
				if got := kt.active.Load(); got != sharing {
					t.Fatalf("step %d: class %s counts %d sharers with work in flight, %d have some", step, Class(c), got, sharing)
				}
			}
		}
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%4, ops[i+1]
			switch op {
			case 0: // an arrival
				ctx := context.Background()
				switch {
				case arg == 255: // a key made up for this request
					made++
					ctx = WithKey(ctx, fmt.Sprint("made-", made))
				case arg == 254: // a long key
					ctx = WithKey(ctx, strings.Repeat("ü", 300))
				case arg >= 128: // no key
				default:
					ctx = WithKey(ctx, fmt.Sprint("k", arg%8))
				}
				if arg%3 == 0 {
					ctx = TargetContextAt(ctx, clock, time.Duration(arg)*time.Millisecond, time.Duration(arg%7)*time.Millisecond)
				}
				w := &Waiter{class: Interactive, kind: KindTask}
				if g.TryAcquire(Interactive) {
					w.started = true
					start(w)
				} else if g.Admit(ctx, w) == nil {
					queued = append(queued, w)
				}
			case 1: // a running task ends
				if len(run) > 0 {
					end(int(arg) % len(run))
				}
			case 2: // a queued task's client gives up
				if len(queued) > 0 {
					k := int(arg) % len(queued)
					if g.Withdraw(queued[k]) {
						queued = append(queued[:k], queued[k+1:]...)
					}
				}
			case 3: // time passes
				clock += int64(arg) * int64(time.Millisecond)
			}
			drain()
			check(i / 2)
		}
		for len(run) > 0 || len(queued) > 0 {
			if len(run) == 0 {
				if !g.Withdraw(queued[0]) {
					t.Fatalf("a queued task with every slot free could not be withdrawn")
				}
				queued = queued[1:]
			} else {
				clock += int64(time.Millisecond)
				end(0)
			}
			drain()
		}
		check(len(ops))
		if n := g.activeKeys(); n != 0 {
			t.Fatalf("every task ended: %d sharers still have work in flight", n)
		}
	})
}
