
	
train?d	
w

scalar"
rng"
configd2
modelfuzz