
L
	
train?d	
w

scalar"
rng"
configd2
modelfuzz	
train/ÿÿÿÿÿÿÿÿÿ
w"

scalar"rngÿÿÿÿÿÿÿÿÿ"config