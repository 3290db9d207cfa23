// Package suspension holds the process-wide suspension of batch-thread
// demotion by the starvation guard of internal/demote: the
// competition for the CPU that starves a demoted thread is a property of
// the machine, not of one executor, so an executor created during a
// suspension starts undemoted instead of paying for its own starvation
// episode. It is a package of its own so that the bench can start each
// variant as a fresh process would (Resume) without a public name in the
// library.
package suspension

import (
	"sync"
	"sync/atomic"
	"time"
)

// State is the suspension. Until is read lock-free; the other fields are
// guarded by Mu.
type State struct {
	Mu       sync.Mutex
	Until    atomic.Int64 // monotonic ns until which demotion is suspended; 0: never
	Cooldown time.Duration
	LastFire int64
}

// Process is this process's suspension.
var Process State

// Resume ends a suspension now and resets its cool-down: demotable
// workers demote again at their next task.
func Resume() {
	Process.Mu.Lock()
	defer Process.Mu.Unlock()
	Process.Until.Store(0)
	Process.LastFire, Process.Cooldown = 0, 0
}
