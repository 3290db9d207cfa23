package cpuwork

import (
	"net"

	"github.com/cpuwork/cpuwork/internal/netwatch"
)

// Network wake-ups (internal/netwatch) reach the executor through
// Checkpoint alone: netwatch.Arrived, false at once while nothing is
// watched, then netwatch.Park.

// WatchListener returns ln, wrapped so that ln and every connection it
// accepts are watched for arrivals while every P is busy: a request that
// arrives while all Ps run tasks calling Checkpoint is read within about
// 200 µs instead of at the runtime's next 10 ms network poll. Wrap
// the network listener itself, under any TLS: tls.NewListener(
// cpuwork.WatchListener(ln), cfg). Closing the returned listener closes
// ln. Outside Linux it returns ln unchanged. A listener or connection
// that cannot be watched is served as usual (Stats.NetWatch.Unwatched).
func WatchListener(ln net.Listener) net.Listener { return netwatch.Watch(ln) }
