package cpuwork

import (
	"context"
	"io"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/cpuwork/cpuwork/internal/netwatch"
)

// While every P runs a Batch task that calls Checkpoint, requests arrive
// on a watched connection: every one is answered, and Checkpoint's polls
// found arrivals and parked a task so its P polled the network. (How much
// sooner they are read is the bench's priority scenario, not a test.)
func TestWatchedArrivalsWakeTheNetpollerWhileEveryPIsBusy(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("WatchListener watches only on Linux")
	}
	P := runtime.GOMAXPROCS(0)
	before := readNetWatch()
	addr, closeEcho := watchedEcho(t)
	defer closeEcho()

	e := newExec(t, Options{Slots: P, WatchInterval: -1})
	defer busyBatch(e, P)()

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	b := []byte{7}
	for i := range 30 {
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, b); err != nil || b[0] != 7 {
			t.Fatalf("echo %d: %v %v", i, b, err)
		}
		time.Sleep(3 * time.Millisecond)
	}
	got := readNetWatch()
	if got.Watched-before.Watched < 2 {
		t.Errorf("watched %d descriptors, want the listener and its connection", got.Watched-before.Watched)
	}
	if got.Polls == before.Polls || got.Wakes == before.Wakes {
		t.Errorf("30 arrivals beside %d busy Ps: %d polls, %d wakes", P, got.Polls-before.Polls, got.Wakes-before.Wakes)
	}
}

// A listener without a file descriptor is returned as it is, and counted.
func TestAListenerWithoutADescriptorIsNotWatched(t *testing.T) {
	before := readNetWatch()
	ln := fakeListener{}
	if got := WatchListener(ln); got != net.Listener(ln) {
		t.Errorf("WatchListener(%T) = %T, want it unchanged", ln, got)
	}
	if runtime.GOOS == "linux" && readNetWatch().Unwatched == before.Unwatched {
		t.Error("the unwatched listener was not counted")
	}
}

type fakeListener struct{}

func (fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (fakeListener) Close() error              { return nil }
func (fakeListener) Addr() net.Addr            { return &net.TCPAddr{} }

// watchedEcho serves an echo on a watched loopback listener.
func watchedEcho(t *testing.T) (addr string, stop func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := WatchListener(ln)
	if runtime.GOOS == "linux" && wl == ln {
		t.Fatal("a TCP listener was returned unwatched")
	}
	go func() {
		for {
			c, err := wl.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().String(), func() { wl.Close() }
}

// readNetWatch is the process's network-watch counters, as Stats reports
// them.
func readNetWatch() NetWatchStats { return NetWatchStats(netwatch.Read()) }

// A task parked so its P polls the network gives its slot up for the
// park: a Critical request that arrives while every slot runs Batch work
// takes the parked task's slot at once, without queuing. Holding the slot
// through the park, every request queued for a Checkpoint to hand a slot
// over. (Counting Batch hand-overs instead confounds the two: a parked
// task rejoins at its earlier due, and the running Batch task hands it
// its slot at its next Checkpoint.)
func TestANetworkParkGivesTheSlotUp(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("WatchListener watches only on Linux")
	}
	P := runtime.GOMAXPROCS(0)
	e := newExec(t, Options{Slots: P, WatchInterval: -1})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl := WatchListener(ln)
	defer wl.Close()
	go func() {
		for {
			c, err := wl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b := []byte{0}
				for {
					if _, err := io.ReadFull(c, b); err != nil {
						return
					}
					e.Do(context.Background(), Critical, func(context.Context) error { return nil })
					if _, err := c.Write(b); err != nil {
						return
					}
				}
			}()
		}
	}()

	defer busyBatch(e, P)()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	const n = 40
	b := []byte{7}
	// At one request per 3 ms every Critical task is timed with weight 1
	// (the timing stride is 1 at gaps over a millisecond): one admitted
	// on a free slot records a queue wait of exactly 0, histogram bucket
	// 0. A round on a machine whose CPUs other work took (every P is
	// then not busy when a request arrives, so no park happens) is tried
	// again, at most three rounds: one round must show it.
	zeroWait := func() uint64 { return e.stats[Critical].queueWait.counts[0].Load() }
	var crit, free, wakes uint64
	for round := range 3 {
		st0, z0, nw0 := e.Stats(), zeroWait(), readNetWatch()
		for i := range n {
			if _, err := c.Write(b); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, b); err != nil {
				t.Fatalf("round %d, request %d: %v", round, i, err)
			}
			time.Sleep(3 * time.Millisecond)
		}
		crit = e.Stats().Classes[Critical].Admitted - st0.Classes[Critical].Admitted
		free, wakes = zeroWait()-z0, readNetWatch().Wakes-nw0.Wakes
		if crit != n {
			t.Fatalf("%d Critical tasks admitted, want %d", crit, n)
		}
		if free > 0 {
			return
		}
	}
	t.Errorf("%d Critical requests, %d network parks in the last of 3 rounds: none found the slot a park gave up", crit, wakes)
}

// busyBatch runs n Batch tasks on e that spin and call Checkpoint every
// 20 µs until the returned stop is called (it waits for them).
func busyBatch(e *Executor, n int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			e.Do(ctx, Batch, func(ctx context.Context) error {
				for ctx.Err() == nil {
					spin(20 * time.Microsecond)
					Checkpoint(ctx)
				}
				return nil
			})
		})
	}
	return func() { cancel(); wg.Wait() }
}
