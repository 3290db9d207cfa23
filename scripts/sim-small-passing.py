# A queueing model (not a measurement) of the inference mix on 2 slots: 90 % small requests of 1 unit
# (an image), 10 % large of 4 parts, Poisson arrivals, service time normal(1, 0.15); a large
# request's parts are due D units after a small one arriving with it (earliest due first,
# ties in arrival order). Prints small requests' and all requests' p99 against D = 0 (FIFO).
# Used in docs/raw/small-requests-passing-2026-11-24.txt. Run: python3 scripts/sim-small-passing.py
import heapq, random
def sim(load, D, n=200000, seed=1, slots=2, cv=0.15):
    rnd=random.Random(seed)
    mean_work = 0.9*1+0.1*4
    lam = load*slots/mean_work
    t=0; arrivals=[]
    for i in range(n):
        t+=rnd.expovariate(lam)
        k = 1 if rnd.random()<0.9 else 4
        arrivals.append((t,k))
    # queue of parts: (due, seq, req, part)
    q=[]; free=slots
    done_parts={}; finish={}
    ai=0; seq=0
    running=[] # heap of end times with req
    while ai<len(arrivals) or q or running:
        next_arr = arrivals[ai][0] if ai<len(arrivals) else float('inf')
        next_end = running[0][0] if running else float('inf')
        if next_arr<=next_end:
            now=next_arr; a,k=arrivals[ai]
            due = a + (D if k==4 else 0)
            for p in range(k):
                heapq.heappush(q,(due,seq,ai,p)); seq+=1
            done_parts[ai]=k; ai+=1
        else:
            now,r=heapq.heappop(running); free+=1
            done_parts[r]-=1
            if done_parts[r]==0: finish[r]=now
        while free>0 and q:
            due,s,r,p=heapq.heappop(q); free-=1
            st = max(0.01, rnd.gauss(1,cv))
            heapq.heappush(running,(now+st,r))
    lat_s=[];lat_a=[]
    for i,(a,k) in enumerate(arrivals[n//10:],start=n//10):
        l=finish[i]-a; lat_a.append(l)
        if k==1: lat_s.append(l)
    lat_s.sort(); lat_a.sort()
    p=lambda xs,q: xs[int(q*len(xs))]
    return p(lat_s,.99), p(lat_a,.99)
for load in (0.8,0.95):
    base=sim(load,0)
    for D in (0,2,4,8,12,16,24,40):
        s,a=sim(load,D)
        print(f"load {load} D {D:3} small p99 {s:6.2f} ({s/base[0]:.2f}x)  all p99 {a:6.2f} ({a/base[1]:.2f}x)")
