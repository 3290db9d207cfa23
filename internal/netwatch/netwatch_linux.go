package netwatch

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// netEpoll is the private epoll set's descriptor, -1 until WatchListener
// first creates it (it then lives as long as the process).
var netEpoll atomic.Int32

var netEpollOnce sync.Once

func init() { netEpoll.Store(-1) }

// watchConn adds c's descriptor to the watched set (EPOLLIN|EPOLLRDHUP,
// level-triggered: see sightings) and reports whether it did.
func watchConn(c any) bool {
	netEpollOnce.Do(func() {
		if fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC); err == nil {
			netEpoll.Store(int32(fd))
		}
	})
	ep := int(netEpoll.Load())
	sc, ok := c.(syscall.Conn)
	if ep < 0 || !ok {
		netStats.unwatched.Add(1)
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		netStats.unwatched.Add(1)
		return false
	}
	var cerr error
	err = rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
		cerr = unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, int(fd), &ev)
		if cerr == unix.EEXIST { // a descriptor number reused after a close the set saw
			cerr = unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, int(fd), &ev)
		}
	})
	if err != nil || cerr != nil {
		netStats.unwatched.Add(1)
		return false
	}
	netStats.watched.Add(1)
	return true
}

// arrived reports whether a watched descriptor has unread input that
// calls for a park (a zero-timeout epoll_wait, then sightings.update).
// Callers are serialised by networkArrived.
func arrived() bool {
	var evs [128]unix.EpollEvent
	for {
		n, err := unix.EpollWait(int(netEpoll.Load()), evs[:], 0)
		if err == unix.EINTR {
			continue
		}
		ready := readyBuf[:0]
		for _, ev := range evs[:max(n, 0)] {
			ready = append(ready, ev.Fd)
		}
		readyBuf = ready
		return seen.update(ready)
	}
}

var (
	seen     = sightings{m: map[int32]uint8{}}
	readyBuf []int32
)

// parker is a timerfd, pollable through its *os.File (which owns fd).
type parker struct {
	f  *os.File
	fd int
}

// parkers are timerfds free for the next park.
var parkers = make(chan parker, 64)

// Park parks the calling goroutine for netParkFor on a timerfd
// the runtime's netpoller watches. Where no timerfd can be made it
// returns at once.
func Park() {
	var p parker
	select {
	case p = <-parkers:
	default:
		fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
		if err != nil {
			return
		}
		p = parker{os.NewFile(uintptr(fd), "cpuwork-netpark"), fd}
	}
	if unix.TimerfdSettime(p.fd, 0, &unix.ItimerSpec{Value: unix.NsecToTimespec(int64(netParkFor))}, nil) == nil {
		var buf [8]byte
		p.f.Read(buf[:]) // parks in the netpoller until the timer expires
	}
	select {
	case parkers <- p:
	default:
		p.f.Close()
	}
}
