import os, pwd, random, socket, time, uuid
print("wall", time.time(), time.strftime("%Y-%m-%d %H:%M:%S"))
print("monotonic", int(time.monotonic()), "boot", int(time.clock_gettime(time.CLOCK_BOOTTIME)))
print("random", random.random(), random.randint(0, 10**9))
print("uuid", uuid.uuid4())
print("urandom", os.urandom(8).hex())
print("hash order", list({"k%d" % i for i in range(8)}), hash("codellm"))
print("host", socket.gethostname(), "user", pwd.getpwuid(os.getuid()).pw_name)
print("address", hex(id(object())))
