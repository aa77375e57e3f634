import threading, time

def leaf(n):
    s = 0
    for i in range(n):
        s += i * i
    return s

def rec(d):
    if d == 0:
        return leaf(2000)
    return rec(d - 1) + leaf(100)

def spin(t):
    end = time.monotonic() + t
    while time.monotonic() < end:
        rec(5)
        [str(i) for i in range(200)]

def sleeper(t):
    time.sleep(t)

th = [threading.Thread(target=spin, args=(0.4,)), threading.Thread(target=sleeper, args=(0.4,))]
for t in th:
    t.start()
spin(0.4)
for t in th:
    t.join()
